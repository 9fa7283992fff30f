//go:build race

package reconcile

// raceEnabled: the race detector slows the reconciler about tenfold, so
// the scale tests shrink under it (TestConvergesWithoutTicks).
const raceEnabled = true
