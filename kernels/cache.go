package kernels

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EnvCacheDir names the environment variable that moves the kernel cache.
const EnvCacheDir = "GPUCOMM_CACHE_DIR"

// cacheFormat changes when what a cache entry holds changes, so old entries
// are never read as new ones.
const cacheFormat = "gpucomm-kernels-1"

// CacheDir is where compiled kernels are kept: GPUCOMM_CACHE_DIR, or
// gpucomm/kernels under os.UserCacheDir.
func CacheDir() (string, error) {
	if d := os.Getenv(EnvCacheDir); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("kernels: no cache directory (set %s): %w", EnvCacheDir, err)
	}
	return filepath.Join(d, "gpucomm", "kernels"), nil
}

// cacheKey names a build: the source, the options (which hold the
// architecture) and the NVRTC version, since a newer NVRTC may emit
// different code from the same source.
func cacheKey(src, file string, opts []string, nvrtcMajor, nvrtcMinor int) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00nvrtc %d.%d\x00%s\x00", cacheFormat, file, nvrtcMajor, nvrtcMinor, strings.Join(opts, "\x00"))
	h.Write([]byte(src))
	arch := "unknown"
	for _, o := range opts {
		if a, ok := strings.CutPrefix(o, "--gpu-architecture="); ok {
			arch = a
		}
	}
	base := strings.TrimSuffix(file, filepath.Ext(file))
	return fmt.Sprintf("%s-%s-nvrtc%d.%d-%s", base, arch, nvrtcMajor, nvrtcMinor, hex.EncodeToString(h.Sum(nil))[:32])
}

// diskCache keeps images in dir, one file per key; an empty dir caches
// nothing.
type diskCache struct{ dir string }

func (c diskCache) path(key string) string { return filepath.Join(c.dir, key+".bin") }

func (c diskCache) load(key string) ([]byte, bool) {
	if c.dir == "" {
		return nil, false
	}
	b, err := os.ReadFile(c.path(key))
	if err != nil || len(b) == 0 {
		return nil, false
	}
	return b, true
}

// store writes the image under a temporary name and renames it, so that a
// process reading the cache never sees half a file. A cache that cannot be
// written is skipped: it only saves time.
func (c diskCache) store(key string, image []byte) {
	if c.dir == "" {
		return
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return
	}
	f, err := os.CreateTemp(c.dir, key+".*.tmp")
	if err != nil {
		return
	}
	_, werr := f.Write(image)
	cerr := f.Close()
	if werr != nil || cerr != nil || os.Rename(f.Name(), c.path(key)) != nil {
		os.Remove(f.Name())
	}
}
