//go:build !race

package testutil

// RaceDetector is true in a binary built with the race detector (go test
// -race): a test that builds a program to run as a process of its own
// builds it with the detector too (RaceBuildFlags).
const RaceDetector = false
