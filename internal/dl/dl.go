package dl

import "os"

// EnvHint is what OpenEnv adds to its error after Open's: how the variable
// env points gpucomm at the library, " (set ENV to its path)" when env is
// unset or empty, else " (named by ENV)", whose value is then the one name
// that Open tried.
func EnvHint(env string) string {
	if os.Getenv(env) != "" {
		return " (named by " + env + ")"
	}
	return " (set " + env + " to its path)"
}

// Candidates returns the library names Open should try: only the value of the
// environment variable env when it is set, so that an override never falls
// back silently to another copy; otherwise defaults, in order.
func Candidates(env string, defaults ...string) []string {
	if p := os.Getenv(env); p != "" {
		return []string{p}
	}
	return defaults
}
