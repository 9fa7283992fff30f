// Package e2e holds gantry's process-level and multi-host tests. They start
// real processes and containers, so every test here but the quick script
// checks is skipped by -short and run by `make test`.
//
// A tour:
//
//   - docker_test.go: the distributed sort across "hosts": master and three
//     workers as Docker containers on a private, internal Docker network the
//     test creates, from gantry's image (scripts/image.sh: FROM scratch plus a static
//     gantry; nothing is pulled). Workers are killed and restarted, paused
//     past the heartbeat timeout, and cut off the network, and the output is
//     checked with `gantry valsort` against the input's checksum.
//   - docker_helpers_test.go: a small helper around the docker CLI that removes every
//     container, network and image it made when the test ends.
//   - image_test.go: the image scripts/image.sh builds (make image) serving
//     ws serve on a published port and running queue worker, as the
//     README shows.
//   - scripts_test.go: scripts/demo.sh's argument checks (they run before
//     it builds anything, so they are quick and -short keeps them).
//
// The package has no non-test API; doc.go exists so `go vet` and the README
// can point at it.
package e2e
