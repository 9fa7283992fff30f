//go:build !race

package taskq

const raceEnabled = false
