//go:build race

package tokens

// raceEnabled thins the exhaustive sweeps: the race detector makes the
// encoder some fifty times slower, and the sweeps prove nothing about races.
const raceEnabled = true
