package dl

import (
	"errors"
	"testing"

	"github.com/gpucomm/gpucomm/internal/errs"
)

// Open's error reads dlerror's reasons: a name searched for on the
// loader's path was found, and refused, unless its reason says no file of
// that name was there; a missing library it needs reads the same, with
// that library's name in front.
func TestOpenErrorSaysWhichNameWasThere(t *testing.T) {
	const nf = ": cannot open shared object file: No such file or directory"
	for _, c := range []struct {
		names, why []string
		want       string
	}{
		{[]string{"libcuda.so.1", "libcuda.so"}, []string{"libcuda.so.1" + nf, "libcuda.so" + nf},
			"dl: cannot open libcuda.so.1, libcuda.so (libcuda.so.1" + nf + "; libcuda.so" + nf + "): library not found"},
		{[]string{"libcuda.so.1", "libcuda.so"}, []string{"libcudadep.so.3" + nf, "libcuda.so" + nf},
			"dl: cannot open libcuda.so.1, libcuda.so (libcudadep.so.3" + nf + "; libcuda.so" + nf + "): libcuda.so.1 exists but could not be loaded"},
		{[]string{"libnvrtc.so.13", "libnvrtc.so"}, []string{"libnvrtc.so.13" + nf, "libnvrtc.so: wrong ELF class: ELFCLASS32"},
			"dl: cannot open libnvrtc.so.13, libnvrtc.so (libnvrtc.so.13" + nf + "; libnvrtc.so: wrong ELF class: ELFCLASS32): libnvrtc.so exists but could not be loaded"},
	} {
		err := openError(c.names, c.why)
		if !errors.Is(err, errs.ErrLibraryNotFound) || err.Error() != c.want {
			t.Errorf("openError(%q, %q) =\n%q\nwant\n%q, wrapping ErrLibraryNotFound", c.names, c.why, err, c.want)
		}
	}
}
