// Package scenarios holds the load shapes shipped with the bench harness,
// one YAML file each; bench/load reads them by name.
package scenarios

import "embed"

// Files holds every shipped scenario, named NAME.yaml.
//
//go:embed *.yaml
var Files embed.FS
