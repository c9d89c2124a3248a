//go:build !race

package mpitest

const raceEnabled = false
