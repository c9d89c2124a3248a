package dl

import "os"

// Candidates returns the library names Open should try: only the value of the
// environment variable env when it is set, so that an override never falls
// back silently to another copy; otherwise defaults, in order.
func Candidates(env string, defaults ...string) []string {
	if p := os.Getenv(env); p != "" {
		return []string{p}
	}
	return defaults
}
