//go:build race

package tokens

// cpuScale stretches the CPU bounds of the hostile-input tests: the race
// detector makes the same work several times slower, and those bounds
// catch superlinear work, which the run without it measures as it is.
const cpuScale = 10
