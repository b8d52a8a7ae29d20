package deploy

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/slotlease/slotlease/buildinfo"
)

// scripts/release.sh VERSION makes, from one command, an archive per
// target with both binaries (VERSION stamped in), the licence, the README,
// docs/deploy.md and the units and Containerfile, and SHA256SUMS that
// sha256sum -c accepts (issue 39).
func TestReleaseArchives(t *testing.T) {
	t.Parallel()
	dir := release(t)

	// SHA256SUMS names every archive, and each sum is right: by
	// sha256sum -c, as a user checks them, and by the test itself.
	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, nil, "sh", "-c", "cd '"+dir+"' && sha256sum -c SHA256SUMS"); code != 0 {
		t.Errorf("sha256sum -c SHA256SUMS: exit %d\n%s", code, out)
	}
	var listed []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(sums)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q: want SUM  NAME", line)
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum {
			t.Errorf("%s: SHA256SUMS says %s, the file's is %x", name, sum, got)
		}
		listed = append(listed, name)
	}
	var want []string
	for _, target := range releaseTargets() {
		want = append(want, "slotlease-"+testVersion+"-"+strings.ReplaceAll(target, "/", "-")+".tar.gz")
	}
	slices.Sort(listed)
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Errorf("SHA256SUMS lists %q, want %q", listed, want)
	}

	for _, name := range want {
		checkArchive(t, filepath.Join(dir, name), strings.TrimSuffix(name, ".tar.gz"))
	}

	// The binaries say the version they were stamped with.
	bin := releasedBinaries(t)
	for _, prog := range []string{"leasemgr", "executor"} {
		out, code := run(t, []string{"HOME=" + t.TempDir()}, filepath.Join(bin, prog), "--version")
		if code != 0 || !strings.HasPrefix(out, prog+" "+testVersion+" ") {
			t.Errorf("%s --version: exit %d, want %q first:\n%s", prog, code, prog+" "+testVersion, out)
		}
		out, _ = run(t, []string{"HOME=" + t.TempDir()}, filepath.Join(bin, prog), "version", "--json")
		var v buildinfo.JSON
		if err := json.Unmarshal([]byte(out), &v); err != nil || v.Version != testVersion || v.SemVer != strings.TrimPrefix(testVersion, "v") {
			t.Errorf("%s version --json: %v, %+v", prog, err, v)
		}
	}

	// A version that is not one is refused before anything is built.
	for _, args := range [][]string{{"1.2"}, {"latest"}, {}} {
		out, code := run(t, nil, filepath.Join(repoRoot, "scripts", "release.sh"), args...)
		if code != 2 || !strings.Contains(out, "v1.2.0") {
			t.Errorf("scripts/release.sh %q: exit %d, want 2 and an example version:\n%s", args, code, out)
		}
	}
}

// checkArchive checks one archive's entries: everything under prefix/,
// owned by 0:0, and exactly the release's files.
func checkArchive(t *testing.T, path, prefix string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tr := tar.NewReader(zr)
	var files []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		rel, ok := strings.CutPrefix(strings.TrimSuffix(h.Name, "/"), prefix)
		if !ok {
			t.Errorf("%s: %s is outside %s/", path, h.Name, prefix)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: %s is owned by %d:%d, want 0:0", path, h.Name, h.Uid, h.Gid)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		rel = strings.TrimPrefix(rel, "/")
		files = append(files, rel)
		isBin := rel == "leasemgr" || rel == "executor"
		if mode := h.Mode & 0o777; (isBin && mode != 0o755) || (!isBin && mode != 0o644) {
			t.Errorf("%s: %s has mode %04o", path, h.Name, mode)
		}
	}
	want := []string{"LICENSE", "README.md", "deploy/container/Containerfile", "deploy/systemd/executor-serve.service",
		"deploy/systemd/leasemgr.service", "docs/deploy.md", "executor", "leasemgr"}
	slices.Sort(files)
	if !slices.Equal(files, want) {
		t.Errorf("%s holds %q, want %q", path, files, want)
	}
}
