// Package hotpath holds the gateway's per-request machinery: key formats and
// verification with the key cache, scopes, request state and ids, and the
// interfaces it consumes (key source). It links no database driver and no
// HTTP server, so everything here is benchmarked in isolation, and nothing in
// it waits on PostgreSQL when the cache already knows the answer.
package hotpath
