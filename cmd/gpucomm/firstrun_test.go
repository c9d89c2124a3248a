package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/launcher"
)

// A wrong backend name used to be answered with "-np applies to the local
// backend only": every command names the unknown backend first.
func TestUnknownBackendIsNamedBeforeAnyFlagAdvice(t *testing.T) {
	for _, cmd := range [][]string{{"bench", "-np", "2"}, {"heat", "-np", "2"}, {"check", "-np", "2"}} {
		t.Setenv("GPUCOMM_BACKEND", "bogus")
		var out, errOut bytes.Buffer
		code := run(cmd, &out, &errOut)
		if code != exitUsage || !strings.Contains(errOut.String(), `unknown backend "bogus"`) || strings.Contains(errOut.String(), "-np applies") {
			t.Errorf("GPUCOMM_BACKEND=bogus %v: exit %d, stderr %q; want 2 naming the unknown backend", cmd, code, errOut.String())
		}
	}
}

// GPUCOMM_DEVICE=cuda or cuda:7 with the local backend ran on the host device
// without a word; bogus too. Each command refuses now.
func TestLocalBackendRefusesADeviceItCannotUse(t *testing.T) {
	for _, spec := range []string{"cuda", "cuda:7", "bogus"} {
		for _, cmd := range [][]string{{"check", "-np", "2", "-short"}, {"heat", "-np", "2", "-n", "20", "-steps", "2"},
			{"bench", "-np", "2", "-op", "allreduce", "-b", "8", "-e", "8", "-n", "1", "-w", "0"}} {
			t.Setenv("GPUCOMM_BACKEND", "")
			t.Setenv("GPUCOMM_DEVICE", spec)
			var out, errOut bytes.Buffer
			code := run(cmd, &out, &errOut)
			if code == exitOK || !strings.Contains(errOut.String(), spec) || !strings.Contains(errOut.String(), "GPUCOMM_DEVICE") && !strings.Contains(errOut.String(), "host devices only") {
				t.Errorf("GPUCOMM_DEVICE=%s %v: exit %d, stderr %q, stdout %q; want a failure naming the device", spec, cmd, code, errOut.String(), out.String())
			}
		}
	}
}

// heat -n 100000000 printed each rank's error twice; now the memory check
// refuses it before allocating, and the ranks' one message is printed once.
func TestHeatTooLargeForTheMachineSaysSoOnce(t *testing.T) {
	code, out, errOut := runHeatCLI(t, "-np", "3", "-n", "100000000", "-steps", "1")
	if code != exitFail || out != "" {
		t.Fatalf("exit %d, stdout %q; want 1 and no report", code, out)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "gpucomm heat: ranks 0-2: solver: a 100000000×100000000 grid over 3 ranks needs") ||
		!regexp.MustCompile(`needs [0-9.]+ GB of host memory.* has [0-9.]+ GB free of [0-9.]+ GB`).MatchString(lines[0]) {
		t.Errorf("stderr:\n%s\nwant one line for ranks 0-2 naming the need and the free memory", errOut)
	}
}

func TestRankErrorsSayEachMessageOnceWithItsRanks(t *testing.T) {
	e := func(s string) error { return &testErr{s} }
	got := rankErrors([]heatResult{{rank: 0, err: e("a")}, {rank: 1, err: e("b")}, {rank: 2, err: e("a")}, {rank: 3}, {rank: 4, err: e("a")}, {rank: 5, err: e("c")}, {rank: 6, err: e("c")}})
	want := []string{"ranks 0, 2, 4: a", "rank 1: b", "ranks 5-6: c"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("rankErrors = %q, want %q", got, want)
	}
}

type testErr struct{ s string }

func (e *testErr) Error() string { return e.s }

// heat and bench read the progress flag the same way: -noprogress, and the
// other's spelling (-progress=false) as an alias.
func TestHeatAndBenchTakeBothProgressSpellings(t *testing.T) {
	for _, args := range [][]string{
		{"heat", "-np", "2", "-n", "20", "-steps", "2", "-noprogress"},
		{"heat", "-np", "2", "-n", "20", "-steps", "2", "-progress=false"},
		{"bench", "-np", "2", "-op", "allreduce", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "-noprogress"},
		{"bench", "-np", "2", "-op", "allreduce", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "-progress=false"},
	} {
		if code, _, errOut := runCLI(t, args...); code != exitOK {
			t.Errorf("%v: exit %d\n%s", args, code, errOut)
		}
	}
	if code, _, _ := runCLI(t, "heat", "-progress=maybe"); code != exitUsage {
		t.Errorf("heat -progress=maybe: exit %d, want 2", code)
	}
}

// info lists every GPUCOMM_ variable the code reads outside tests (the test
// harness's own GPUCOMM_*_TEST_* aside), so that a new one cannot hide.
func TestInfoListsEveryVariableTheCodeReads(t *testing.T) {
	root := filepath.Join("..", "..")
	re := regexp.MustCompile(`"(GPUCOMM_[A-Z0-9_]+)"`)
	read := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			if !strings.Contains(m[1], "_TEST_") {
				read[m[1]] = path
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(read) < 10 {
		t.Fatalf("found only %v in the source; is the walk rooted right?", read)
	}
	listed := map[string]bool{}
	for _, k := range knobs {
		listed[k] = true
	}
	for name, path := range read {
		if !listed[name] {
			t.Errorf("%s (read in %s) is not among info's knobs", name, path)
		}
	}
	withSections(t)
	_, out, _ := runCLI(t, "info")
	for _, k := range knobs {
		if !regexp.MustCompile(`(?m)^  ` + k + `\s+\S`).MatchString(out) {
			t.Errorf("info prints no line for %s:\n%s", k, out)
		}
	}
}

// A loader's failure is one short phrase naming the library and the variable
// that points gpucomm at it, not every path the loader tried.
func TestShortReasonNamesTheLibraryAndItsVariable(t *testing.T) {
	long := "NCCL not usable: nccl: load NCCL: dl: cannot open libnccl.so.2, libnccl.so (libnccl.so.2: cannot open shared object file: No such file or directory; " +
		"libnccl.so: cannot open shared object file: No such file or directory): library not found; no GPU: devmem: cuda driver: cuda: load the driver API: dl: cannot open " +
		"libcuda.so.1, libcuda.so (libcuda.so.1: cannot open shared object file: No such file or directory; libcuda.so: cannot open shared object file: No such file or directory): library not found"
	want := "NCCL not usable: libnccl.so.2 not found (set GPUCOMM_NCCL_LIB to its path); no GPU: libcuda.so.1 not found (set GPUCOMM_CUDA_LIB to its path)"
	if got := shortReason(long); got != want {
		t.Errorf("shortReason =\n%q\nwant\n%q", got, want)
	}
	if s := "in-process ranks; always available"; shortReason(s) != s {
		t.Errorf("shortReason changed %q", s)
	}
}

// "not found" only when no file of any name tried exists: otherwise the
// loader's own reason, short, for the first name that would not load.
func TestShortReasonSaysNotFoundOnlyWhenNothingWasFound(t *testing.T) {
	const nf = ": cannot open shared object file: No such file or directory"
	for _, c := range []struct{ in, want string }{
		{"NCCL not usable: nccl: load NCCL: dl: cannot open libnccl.so.2, libnccl.so (libnccl.so.2" + nf + "; libnccl.so" + nf +
			"): library not found (set GPUCOMM_NCCL_LIB to its path)",
			"NCCL not usable: libnccl.so.2 not found (set GPUCOMM_NCCL_LIB to its path)"},
		{"NCCL not usable: nccl: load NCCL: dl: cannot open /etc/passwd (/etc/passwd: invalid ELF header): library not found (named by GPUCOMM_NCCL_LIB)",
			"NCCL not usable: GPUCOMM_NCCL_LIB=/etc/passwd cannot be loaded: invalid ELF header"},
		{"NCCL not usable: nccl: load NCCL: dl: cannot open /opt/x/libnccl.so.2 (/opt/x/libnccl.so.2" + nf + "): library not found (named by GPUCOMM_NCCL_LIB)",
			"NCCL not usable: GPUCOMM_NCCL_LIB=/opt/x/libnccl.so.2 not found"},
		// Found on the loader's path, but a library it needs is missing:
		// dlerror names only that one.
		{"no GPU: devmem: cuda driver: cuda: load the driver API: dl: cannot open libcuda.so.1, libcuda.so (libcudadep.so.3" + nf + "; libcuda.so" + nf +
			"): library not found (set GPUCOMM_CUDA_LIB to its path)",
			"no GPU: libcuda.so.1 cannot be loaded: it needs libcudadep.so.3, which is not found (GPUCOMM_CUDA_LIB can name another copy)"},
		// The first name is absent, the second is there and broken; glibc's
		// reason holds parentheses of its own.
		{"nvrtc: load the run-time compiler: dl: cannot open libnvrtc.so.13, libnvrtc.so (libnvrtc.so.13" + nf +
			"; /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.99' not found (required by /usr/lib/libnvrtc.so)): library not found (set GPUCOMM_NVRTC_LIB to its path)",
			"libnvrtc.so cannot be loaded: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.99' not found (required by /usr/lib/libnvrtc.so) (GPUCOMM_NVRTC_LIB can name another copy)"},
	} {
		if got := shortReason(c.in); got != c.want {
			t.Errorf("shortReason(%q) =\n%q\nwant\n%q", c.in, got, c.want)
		}
	}
}

// launchers are the real multi-rank launchers a first-time user runs a
// binary built without MPI under, with what each must be named as.
var launchers = []struct {
	bin  string
	args []string
	name string // as the refusal names it
	tag  string // the rebuild it advises
}{
	{"mpirun.openmpi", []string{"--allow-run-as-root", "--oversubscribe", "-np", "2"}, "Open MPI mpirun", "-tags mpi (Open MPI"},
	{"mpiexec.mpich", []string{"-n", "2"}, "MPICH Hydra mpiexec", "-tags mpich (MPICH"},
}

// buildWithoutMPI builds the gpucomm command with no build tags, whatever
// tags this test binary has: the binary of a first run.
func buildWithoutMPI(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH to build the binary with")
	}
	bin := filepath.Join(t.TempDir(), "gpucomm")
	build := exec.Command(goTool, "build", "-tags", "", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// launch runs argv under the launcher and returns its exit code and output.
func launch(t *testing.T, path string, args []string, argv ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append(args, argv...)...)
	cmd.Env = append(os.Environ(), "GPUCOMM_BACKEND=", "GPUCOMM_DEVICE=")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %v hung past 90 s:\n%s", path, argv, out)
	}
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// Under mpirun -np 2 (and MPICH's mpiexec -n 2) a binary built without MPI
// ran each process as rank 0 of a job of its own, and check printed two
// passing reports. Each command that would run local must now fail at once
// naming the launcher, its size, the build and the fix; info prints once.
func TestUnderARealLauncherABinaryWithoutMPIRefusesToRunAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("launches real MPI jobs")
	}
	if _, ok := launcher.FromEnv(); ok {
		t.Skip("this test is itself under a launcher; it starts its own")
	}
	bin := buildWithoutMPI(t)
	for _, l := range launchers {
		t.Run(l.bin, func(t *testing.T) {
			path, err := exec.LookPath(l.bin)
			if err != nil {
				t.Skipf("%s not installed", l.bin)
			}
			for _, argv := range [][]string{
				{"check", "-backend", "auto", "-short"},
				{"check", "-backend", "local", "-short"},
				{"heat", "-n", "20", "-steps", "2"},
				{"bench", "-op", "allreduce", "-b", "8", "-e", "8", "-n", "1", "-w", "0"},
			} {
				code, out := launch(t, path, l.args, append([]string{bin}, argv...)...)
				if code == 0 {
					t.Errorf("%s %v: exit 0; want a failure\n%s", l.bin, argv, out)
				}
				for _, w := range []string{l.name, "of 2 ranks", "built without MPI", l.tag} {
					if !strings.Contains(out, w) {
						t.Errorf("%s %v: exit %d, output does not say %q:\n%s", l.bin, argv, code, w, out)
					}
				}
				if strings.Contains(out, "PASS") {
					t.Errorf("%s %v: a report passed:\n%s", l.bin, argv, out)
				}
			}
			code, out := launch(t, path, l.args, bin, "info")
			if n := strings.Count(out, "Backends (best first):"); code != 0 || n != 1 {
				t.Errorf("%s info: exit %d, %d reports; want 0 and one report:\n%s", l.bin, code, n, out)
			}
		})
	}
}

// test.sh ran its Open MPI phase on a machine with only MPICH (Debian's
// mpich provides mpirun) and failed on pkg-config ompi: a family counts when
// pkg-config knows it and its own launcher is there. Checked on a PATH that
// holds MPICH's mpiexec as "mpirun" and a pkg-config that knows no ompi.
func TestTestShTellsMPIFamiliesApart(t *testing.T) {
	pc, err := exec.LookPath("pkg-config")
	if err != nil {
		t.Skip("no pkg-config")
	}
	mpich, err := exec.LookPath("mpiexec.mpich")
	if err != nil {
		t.Skip("MPICH's mpiexec.mpich not installed")
	}
	grep, err := exec.LookPath("grep")
	if err != nil {
		t.Skip("no grep")
	}
	script, err := os.ReadFile(filepath.Join("..", "..", "test.sh"))
	if err != nil {
		t.Fatal(err)
	}
	fn := regexp.MustCompile(`(?ms)^has_family\(\) \{.*?^\}`).Find(script)
	if fn == nil {
		t.Fatal("test.sh has no has_family function")
	}
	for _, tc := range []struct {
		ompiKnown bool
		want      string
	}{{false, "ompi: pkg-config does not know ompi"}, {true, "ompi: no Open MPI mpirun"}} {
		dir := t.TempDir()
		fake := "#!/bin/sh\nexec " + pc + " \"$@\"\n"
		if !tc.ompiKnown {
			fake = "#!/bin/sh\n[ \"$2\" = ompi ] && exit 1\n" + fake[len("#!/bin/sh\n"):]
		}
		if err := os.WriteFile(filepath.Join(dir, "pkg-config"), []byte(fake), 0o755); err != nil {
			t.Fatal(err)
		}
		for name, target := range map[string]string{"mpirun": mpich, "mpiexec.mpich": mpich, "grep": grep} {
			if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
		sh := string(fn) + "\nPATH=" + dir + "\nfor f in ompi mpich; do if why=$(has_family $f); then echo \"$f: yes\"; else echo \"$f: $why\"; fi; done\n"
		out, err := exec.Command("bash", "-c", sh).CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), "mpich: yes") {
			t.Errorf("ompi known to pkg-config %v: %q; want %q and mpich found", tc.ompiKnown, out, tc.want)
		}
	}
}
