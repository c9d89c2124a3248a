package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/comm/driver"
)

// bench runs Main with GPUCOMM_BACKEND cleared, as a shell would.
func bench(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv("GPUCOMM_BACKEND", "")
	var out, errOut bytes.Buffer
	code = Main(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// tinyArgs is a short sweep: 8, 32, 128, 512 bytes of float32.
var tinyArgs = []string{"-b", "8", "-e", "512", "-f", "4", "-n", "3", "-w", "1", "-c", "1", "-window", "4"}

// wantRows counts the sizes of tinyArgs that give an operation at least
// one element per rank on n ranks.
func wantRows(t *testing.T, op Operation, n int) int {
	rows := 0
	for _, size := range []int64{8, 32, 128, 512} {
		sh, err := ShapeOf(op, size, 4, n)
		if err != nil {
			t.Fatal(err)
		}
		if sh.Count > 0 {
			rows++
		}
	}
	return rows
}

func TestTableHasNcclTestsColumnsAndARowPerSize(t *testing.T) {
	for _, n := range []int{2, 4} {
		ops := []Operation{AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, PingPong, Bandwidth}
		code, out, errOut := bench(t, append([]string{"-np", strconv.Itoa(n), "-op", "all"}, tinyArgs...)...)
		if code != ExitOK {
			t.Fatalf("np %d: exit %d\n%s", n, code, errOut)
		}
		if errOut != "" {
			t.Errorf("np %d: stderr not empty (no terminal, so no progress bar):\n%s", n, errOut)
		}
		sections := strings.Split(out, "\n#\n# ")
		if len(sections) != len(ops)+2 { // the preamble, one per operation, the verdict
			t.Fatalf("np %d: %d sections, want %d:\n%s", n, len(sections), len(ops)+2, out)
		}
		for i, op := range ops {
			lines := strings.Split(strings.TrimSpace(sections[i+1]), "\n")
			if !strings.HasPrefix(lines[0], op.String()+" (") {
				t.Errorf("np %d: section %d is %q, want %v", n, i, lines[0], op)
			}
			header := strings.Fields(strings.TrimPrefix(lines[1], "#"))
			if strings.Join(header, " ") != strings.Join(TableColumns, " ") {
				t.Errorf("np %d %v: header %q, want %q", n, op, header, TableColumns)
			}
			for _, want := range []string{"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"} {
				if !strings.Contains(lines[1], want) {
					t.Errorf("np %d %v: header lacks %s", n, op, want)
				}
			}
			var rows [][]string
			for _, l := range lines[3:] {
				if !strings.HasPrefix(l, "#") {
					rows = append(rows, strings.Fields(l))
				}
			}
			if len(rows) != wantRows(t, op, n) {
				t.Errorf("np %d %v: %d rows, want %d:\n%s", n, op, len(rows), wantRows(t, op, n), sections[i+1])
			}
			col := func(name string) int {
				for j, c := range TableColumns {
					if c == name {
						return j
					}
				}
				t.Fatalf("no column %s", name)
				return -1
			}
			for _, r := range rows {
				if len(r) != len(TableColumns) {
					t.Errorf("np %d %v: row %q has %d fields, want %d", n, op, r, len(r), len(TableColumns))
					continue
				}
				if r[col("#wrong")] != "0" || r[col("type")] != "float32" || r[col("base")] != "-" {
					t.Errorf("np %d %v: row %q: want #wrong 0, float32, no baseline", n, op, r)
				}
				if v, err := strconv.ParseFloat(r[col("time")], 64); err != nil || !(v > 0) {
					t.Errorf("np %d %v: time %q", n, op, r[col("time")])
				}
			}
		}
		if !strings.Contains(out, "Wrong elements : 0 OK") {
			t.Errorf("np %d: no OK verdict:\n%s", n, out)
		}
	}
}

func TestJSONAndCSVCarryTheSameResults(t *testing.T) {
	args := append([]string{"-np", "2", "-op", "allreduce,pingpong"}, tinyArgs...)
	code, out, errOut := bench(t, append(args, "-json", "-label", "mine")...)
	if code != ExitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	var rep Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("-json output is not JSON: %v\n%s", err, out)
	}
	if rep.Backend != "local" || rep.Ranks != 2 || rep.Label != "mine" || len(rep.Results) != 8 {
		t.Errorf("report %+v", rep)
	}
	if rep.Results[0].Operation != AllReduce || rep.Results[7].Operation != PingPong || rep.Results[7].Size != 512 {
		t.Errorf("results out of order: first %v, last %v of %d", rep.Results[0].Operation, rep.Results[7].Operation, rep.Results[7].Size)
	}

	code, out, errOut = bench(t, append(args, "-csv")...)
	if code != ExitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("-csv output: %v", err)
	}
	if len(recs) != 9 || strings.Join(recs[0], ",") != strings.Join(CSVHeader, ",") {
		t.Fatalf("%d records, header %v", len(recs), recs[0])
	}
	for _, r := range recs[1:] {
		if len(r) != len(CSVHeader) || r[18] != "0" {
			t.Errorf("row %v: want %d fields and wrong 0", r, len(CSVHeader))
		}
	}
}

func TestPlotIsAPNGOrSVGOfTheExpectedShape(t *testing.T) {
	dir := t.TempDir()
	pngPath, svgPath, jsonPath := filepath.Join(dir, "b.png"), filepath.Join(dir, "b.svg"), filepath.Join(dir, "earlier.json")
	args := append([]string{"-np", "2", "-op", "allgather,pingpong,bw"}, tinyArgs...)
	code, out, errOut := bench(t, append(args, "-json")...)
	if code != ExitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	if err := os.WriteFile(jsonPath, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := bench(t, append(args, "-plot", pngPath, "-compare", jsonPath)...); code != ExitOK {
		t.Fatalf("-plot png: exit %d\n%s", code, errOut)
	}
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("plot is not a PNG: %v", err)
	}
	w, h := PlotPixels(3)
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Errorf("PNG is %dx%d, want %dx%d for three operations", b.Dx(), b.Dy(), w, h)
	}

	if code, _, errOut := bench(t, append(args, "-plot", svgPath, "-op", "reduce")...); code != ExitOK {
		t.Fatalf("-plot svg: exit %d\n%s", code, errOut)
	}
	data, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(data))
	var root string
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG does not parse as XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Errorf("SVG root element %q", root)
	}
	if !bytes.Contains(data, []byte("reduce: bus bandwidth")) {
		t.Error("SVG lacks the reduce panel's title")
	}
}

func TestBadFlagsAreUsageErrors(t *testing.T) {
	dir := t.TempDir()
	notJSON := filepath.Join(dir, "x.json")
	if err := os.WriteFile(notJSON, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string][]string{
		"bad min size":            {"-b", "abc"},
		"max below min":           {"-b", "1M", "-e", "8"},
		"zero factor":             {"-f", "0"},
		"unknown dtype":           {"-d", "float128"},
		"unknown reduction":       {"-o", "xor"},
		"root beyond the ranks":   {"-np", "2", "-r", "2"},
		"negative root":           {"-r", "-1"},
		"no iterations":           {"-n", "0"},
		"negative warm-up":        {"-w", "-1"},
		"empty window":            {"-window", "0"},
		"unknown operation":       {"-op", "gather"},
		"json and csv":            {"-json", "-csv"},
		"plot of another format":  {"-plot", "x.pdf"},
		"compare without plot":    {"-compare", notJSON},
		"compare of a bad report": {"-plot", filepath.Join(dir, "p.png"), "-compare", notJSON},
		"no ranks":                {"-np", "0"},
		"ranks past local's most": {"-np", "10000000"},
		"pingpong on one rank":    {"-np", "1", "-op", "pingpong"},
		"local on a GPU":          {"-device", "cuda"},
		"negative timeout":        {"-timeout", "-1s"},
		"unknown flag":            {"-x"},
		"stray argument":          {"allreduce"},
		"np for mpi":              {"-backend", "mpi", "-np", "4"},
	}
	for name, args := range cases {
		code, out, errOut := bench(t, args...)
		if code != ExitUsage {
			t.Errorf("%s %v: exit %d, want 2\n%s", name, args, code, errOut)
		}
		if out != "" || errOut == "" {
			t.Errorf("%s: stdout %q, stderr %q; want the complaint on stderr only", name, out, errOut)
		}
	}
	if code, _, errOut := bench(t, "-backend", "nosuch", "-np", "1"); code == ExitOK || !strings.Contains(errOut, "local") {
		t.Errorf("unknown backend: exit %d, stderr %q; want a failure naming the known backends", code, errOut)
	}
	if code, _, errOut := bench(t, "-h"); code != ExitOK || !strings.Contains(errOut, "nccl-tests") {
		t.Errorf("-h: exit %d, stderr %q", code, errOut)
	}
}

func TestSingleRankRunsTheCollectivesOnly(t *testing.T) {
	code, out, errOut := bench(t, append([]string{"-np", "1", "-d", "half", "-o", "max"}, tinyArgs...)...)
	if code != ExitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	if strings.Contains(out, "# pingpong") || !strings.Contains(out, "# alltoall") || !strings.Contains(out, "float16") {
		t.Errorf("one rank should run the six collectives in float16:\n%s", out)
	}
}

// -cpuprofile writes a profile pprof can read (a gzip'd protobuf: it starts
// with gzip's magic), and a file that cannot be made is an error, not a run.
func TestCPUProfileFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	var out, errb bytes.Buffer
	if rc := Main(context.Background(), []string{"-np", "2", "-op", "allreduce", "-b", "8", "-e", "64", "-n", "5", "-w", "1", "-nobaseline", "-noprogress", "-cpuprofile", path}, &out, &errb); rc != 0 {
		t.Fatalf("exit %d: %s", rc, errb.String())
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile %q: %d bytes, %v; want a gzip'd profile", path, len(b), err)
	}
	errb.Reset()
	if rc := Main(context.Background(), []string{"-np", "2", "-op", "allreduce", "-b", "8", "-e", "8", "-noprogress", "-cpuprofile", filepath.Join(path, "no", "such")}, &out, &errb); rc == 0 || !strings.Contains(errb.String(), "-cpuprofile") {
		t.Errorf("exit %d, %q; want a failure naming -cpuprofile", rc, errb.String())
	}
}

// GPUCOMM_BACKEND overrides -backend, with a note for the errors it causes
// that says it did; none when it is unset or names the backend -backend gave.
func TestBackendFromEnvSaysWhereTheBackendCameFrom(t *testing.T) {
	for _, c := range []struct {
		env, flag string
		given     bool
		backend   string
		note      string // "" or what the note must say
	}{
		{"", "local", false, "local", ""},
		{"", "mpi", true, "mpi", ""},
		{"mpi", "mpi", true, "mpi", ""},
		{"mpi", "local", false, "mpi", "(the backend came from GPUCOMM_BACKEND=mpi in the environment; unset it to choose with -backend, whose default is local)"},
		{"mpi", "local", true, "mpi", "(the backend came from GPUCOMM_BACKEND=mpi in the environment, which overrides -backend local; unset it to choose with -backend)"},
	} {
		t.Setenv("GPUCOMM_BACKEND", c.env)
		var said strings.Builder
		backend, note := BackendFromEnv("gpucomm x", c.flag, c.given, &said)
		if backend != c.backend || c.note == "" && note != "" || c.note != "" && note != " "+c.note {
			t.Errorf("GPUCOMM_BACKEND=%q -backend %s (given %v): %q, %q; want %q and note %q", c.env, c.flag, c.given, backend, note, c.backend, c.note)
		}
		// Said at once only where the variable overrode a -backend given.
		want := ""
		if c.given && c.env != "" && c.env != c.flag {
			want = "gpucomm x: GPUCOMM_BACKEND=" + c.env + " overrides -backend " + c.flag + "\n"
		}
		if said.String() != want {
			t.Errorf("GPUCOMM_BACKEND=%q -backend %s (given %v) said %q on stderr, want %q", c.env, c.flag, c.given, said.String(), want)
		}
	}
}

// bench's errors that the choice of backend causes say that
// GPUCOMM_BACKEND made it, when it did: the README's quick start in a shell
// that still holds the variable.
func TestBenchErrorsOfTheBackendChoiceNameGPUCOMMBackend(t *testing.T) {
	for _, c := range []struct {
		env  string
		args []string
		code int
		says []string
	}{
		{oneRankBackend, []string{"-np", "4"}, ExitUsage, []string{"-np applies to the local backend only",
			"(the backend came from GPUCOMM_BACKEND=" + oneRankBackend + " in the environment; unset it to choose with -backend, whose default is local)"}},
		{oneRankBackend, []string{"-n", "1"}, ExitFail, []string{oneRankReason, "the backend came from GPUCOMM_BACKEND=" + oneRankBackend}},
		{"nosuch", []string{"-backend", "local"}, ExitUsage, []string{`unknown backend "nosuch"`,
			"GPUCOMM_BACKEND=nosuch in the environment, which overrides -backend local"}},
		{"local", []string{"-backend", oneRankBackend, "-device", "cuda"}, ExitUsage, []string{"the local backend runs on simulated host devices only",
			"GPUCOMM_BACKEND=local in the environment, which overrides -backend " + oneRankBackend}},
	} {
		t.Setenv("GPUCOMM_BACKEND", c.env)
		var out, errOut bytes.Buffer
		code := Main(context.Background(), c.args, &out, &errOut)
		if code != c.code {
			t.Errorf("GPUCOMM_BACKEND=%s bench %v: exit %d, want %d; stderr:\n%s", c.env, c.args, code, c.code, errOut.String())
		}
		for _, want := range c.says {
			if !strings.Contains(errOut.String(), want) {
				t.Errorf("GPUCOMM_BACKEND=%s bench %v: stderr does not say %q:\n%s", c.env, c.args, want, errOut.String())
			}
		}
	}
}

// oneRankBackend stands in for an MPI backend (one rank a process) that
// cannot open here, ranked below local so that auto still means local.
const (
	oneRankBackend = "test-bench-one-rank"
	oneRankReason  = "no launcher in this test"
)

func init() {
	comm.Register(oneRankBackend, driver.Driver{
		Rank:  -1,
		Open:  func(comm.Options) (driver.Conn, error) { return nil, errors.New(oneRankReason) },
		Probe: func() comm.Verdict { return comm.Verdict{Reason: oneRankReason} },
	})
}

// -d takes gpucomm's names and nccl-tests' aliases, as -h lists them, and a
// name it does not take is an error listing both.
func TestDTypeNamesAndNCCLTestsAliases(t *testing.T) {
	for name, want := range map[string]comm.DType{
		"float32": comm.Float32, "bfloat16": comm.BFloat16, "char": comm.Int8, "int": comm.Int32, "half": comm.Float16,
		"float": comm.Float32, "double": comm.Float64, "fp16": comm.Float16, "bf16": comm.BFloat16, "fp32": comm.Float32, "fp64": comm.Float64,
		"DOUBLE": comm.Float64,
	} {
		if got, err := parseDType(name); err != nil || got != want {
			t.Errorf("parseDType(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	_, err := parseDType("quad")
	if err == nil || !strings.Contains(err.Error(), "float64") || !strings.Contains(err.Error(), "char, int, half") {
		t.Errorf("parseDType(quad) = %v; want an error listing the names and the aliases", err)
	}
	if _, _, errOut := bench(t, "-h"); !strings.Contains(errOut, "char, int, half, float, double (and fp16, bf16, fp32, fp64)") {
		t.Errorf("bench -h does not list -d's aliases:\n%s", errOut)
	}
}

// CheckArgs refuses what Main refuses before it runs, with Main's message,
// and passes what Main would run, running nothing.
func TestCheckArgsJudgesAsMainDoes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-np", "2", "-op", "allreduce", "-b", "8", "-e", "64"}, ExitOK, ""},
		{[]string{"-h"}, ExitOK, "usage: gpucomm bench"},
		{[]string{"stray"}, ExitUsage, `unexpected argument "stray"`},
		{[]string{"-op", "gather"}, ExitUsage, "-op"},
		{[]string{"-b", "64", "-e", "8"}, ExitUsage, "-b"},
		{[]string{"-plot", "p.gif"}, ExitUsage, "want a .png or .svg file"},
		{[]string{"-plot", "p.png", "-compare", "/nonexistent/report.json"}, ExitUsage, "-compare"},
	} {
		var errOut bytes.Buffer
		code := CheckArgs(tc.args, &errOut)
		if code != tc.code || !strings.Contains(errOut.String(), tc.want) || (tc.want == "" && errOut.Len() > 0) {
			t.Errorf("CheckArgs(%q) = %d, stderr %q; want %d and %q", tc.args, code, errOut.String(), tc.code, tc.want)
		}
	}
	t.Setenv("GPUCOMM_TIMEOUT", "soon")
	var errOut bytes.Buffer
	if code := CheckArgs(nil, &errOut); code != ExitUsage || !strings.Contains(errOut.String(), "GPUCOMM_TIMEOUT") {
		t.Errorf("CheckArgs with GPUCOMM_TIMEOUT=soon = %d, %q; want usage status naming the variable", code, errOut.String())
	}
}

// A configuration no run can do on this many ranks (a root outside them, a
// sweep with no whole element per rank) is a usage error, status 2, as a bad
// flag is, found before anything runs; it was a failure, status 1.
func TestConfigurationsNoRunCanDoAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-np", "3", "-op", "allgather", "-b", "4", "-e", "8", "-noprogress"},
		{"-np", "3", "-op", "broadcast", "-r", "7", "-b", "8", "-e", "8", "-noprogress"},
	} {
		var out, errOut bytes.Buffer
		if code := Main(context.Background(), args, &out, &errOut); code != ExitUsage || out.Len() != 0 || !strings.Contains(errOut.String(), "invalid argument") {
			t.Errorf("bench %q: exit %d, stdout %q, stderr %q; want %d and the reason", args, code, out.String(), errOut.String(), ExitUsage)
		}
	}
}
