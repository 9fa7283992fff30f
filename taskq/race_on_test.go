//go:build race

package taskq

// raceEnabled: the race detector slows workers several times over, so
// tests that push tens of thousands of tasks push fewer under it.
const raceEnabled = true
