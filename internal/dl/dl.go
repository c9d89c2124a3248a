package dl

import (
	"fmt"
	"os"
	"strings"

	"github.com/gpucomm/gpucomm/internal/errs"
)

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

// notFoundSuffix ends dlerror's reason (glibc's) for a name that it found
// no file for: "NAME: cannot open shared object file: No such file or
// directory". A missing library that NAME needs reads the same, but with
// that library's name in front.
const notFoundSuffix = ": cannot open shared object file: No such file or directory"

// exists says whether the loader found a file for name, which dlopen then
// refused with the reason why: a name with a slash is a path, there when
// it is there; another is searched for, and found unless why says that it
// was not.
func exists(name, why string) bool {
	if strings.ContainsRune(name, '/') {
		_, err := os.Stat(name)
		return err == nil
	}
	return why != name+notFoundSuffix
}

// loadError is Open's error for a file that is there but that the loader
// refused: its text says so, not "library not found", and it still wraps
// errs.ErrLibraryNotFound for errors.Is.
type loadError struct{ msg string }

func (e *loadError) Error() string { return e.msg }
func (e *loadError) Unwrap() error { return errs.ErrLibraryNotFound }

// openError is Open's error for names, none of which opened, with
// dlerror's reason for each (why): "dl: cannot open NAMES (WHYS): library
// not found" when no name had a file, else "...: NAME exists but could not
// be loaded" for the first name that had one. Either wraps
// errs.ErrLibraryNotFound.
func openError(names, why []string) error {
	head := fmt.Sprintf("dl: cannot open %s (%s)", strings.Join(names, ", "), strings.Join(why, "; "))
	for i, name := range names {
		if i < len(why) && exists(name, why[i]) {
			return &loadError{msg: head + ": " + name + " exists but could not be loaded"}
		}
	}
	return fmt.Errorf("%s: %w", head, errs.ErrLibraryNotFound)
}
