//go:build !race

package tokens

// cpuScale stretches the CPU bounds of the hostile-input tests (race_on_test.go).
const cpuScale = 1
