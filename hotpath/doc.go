// Package hotpath holds the gateway's per-request machinery: key formats and
// verification with the key cache, scopes, request state and ids, the tier
// table, the upstream breaker, the concurrency gate, idempotency, the ledger
// row, and the interfaces it consumes (key source, usage sink). It links no
// database driver and no HTTP server, so everything here is benchmarked in
// isolation, and nothing in it waits on PostgreSQL when the cache already
// knows the answer.
//
// Metering (plans, windows, budgets, charges, money and the counter store)
// is not here: it is hotpath/meter's alone.
package hotpath
