package nvrtc

import (
	"fmt"

	"github.com/gpucomm/gpucomm/internal/errs"
)

// EnvLib names the environment variable that overrides the library path.
const EnvLib = "GPUCOMM_NVRTC_LIB"

// nvrtcResult values callers may test for.
const (
	NVRTC_SUCCESS               = 0
	NVRTC_ERROR_OUT_OF_MEMORY   = 1
	NVRTC_ERROR_INVALID_INPUT   = 3
	NVRTC_ERROR_INVALID_PROGRAM = 4
	NVRTC_ERROR_INVALID_OPTION  = 5
	NVRTC_ERROR_COMPILATION     = 6
	NVRTC_ERROR_INTERNAL_ERROR  = 11
)

// goResultNames names results when the library cannot (before Load).
var goResultNames = []string{
	"NVRTC_SUCCESS", "NVRTC_ERROR_OUT_OF_MEMORY", "NVRTC_ERROR_PROGRAM_CREATION_FAILURE",
	"NVRTC_ERROR_INVALID_INPUT", "NVRTC_ERROR_INVALID_PROGRAM", "NVRTC_ERROR_INVALID_OPTION",
	"NVRTC_ERROR_COMPILATION", "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE",
	"NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION", "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
	"NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID", "NVRTC_ERROR_INTERNAL_ERROR",
	"NVRTC_ERROR_TIME_FILE_WRITE_FAILED",
}

func goResultName(code int) string {
	if code >= 0 && code < len(goResultNames) {
		return goResultNames[code]
	}
	return fmt.Sprintf("NVRTC_ERROR_%d", code)
}

// Error is a failed NVRTC call. For a failed compilation Log holds the
// compiler's messages, and Error() includes them.
type Error struct {
	Call    string // "nvrtcCompileProgram"
	Program string // the name given to Compile
	Code    int    // the nvrtcResult
	Name    string // "NVRTC_ERROR_COMPILATION"
	Log     string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("nvrtc: %s: %s (%d)", e.Call, e.Name, e.Code)
	if e.Program != "" {
		s = fmt.Sprintf("nvrtc: compile %s: %s: %s (%d)", e.Program, e.Call, e.Name, e.Code)
	}
	if e.Log != "" {
		s += ":\n" + e.Log
	}
	return s
}

// Unwrap maps a bad option or input to errs.ErrInvalidArgument.
func (e *Error) Unwrap() error {
	if e.Code == NVRTC_ERROR_INVALID_OPTION || e.Code == NVRTC_ERROR_INVALID_INPUT {
		return errs.ErrInvalidArgument
	}
	return nil
}
