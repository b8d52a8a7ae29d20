package jetstream

import (
	"os"
	"path/filepath"
	"testing"
)

func makeStore(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "jetstream", "SLOTLEASE", "streams"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "jetstream", "SLOTLEASE", "streams", "1.blk"), []byte("lease"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func checkStore(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "jetstream", "SLOTLEASE", "streams", "1.blk"))
	if err != nil || string(b) != "lease" {
		t.Fatalf("the store's file: %q, %v", b, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "jetstream", "SLOTLEASE"))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("a directory's mode: %v, %v; want 0700", fi.Mode(), err)
	}
}

func TestMoveStore(t *testing.T) {
	base := t.TempDir()
	old, store := filepath.Join(base, "old"), filepath.Join(base, "new")
	makeStore(t, old)
	if err := os.Mkdir(store, 0o700); err != nil { // an empty one is replaced
		t.Fatal(err)
	}
	if err := MoveStore(old, store); err != nil {
		t.Fatal(err)
	}
	checkStore(t, store)
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the old store is still there: %v", err)
	}
	// Into a store that is not empty: refused, both as they were.
	makeStore(t, old)
	if err := MoveStore(old, store); err == nil {
		t.Fatal("moved into a store that is not empty")
	}
	checkStore(t, old)
	checkStore(t, store)
}

// The copy MoveStore falls back to across file systems.
func TestCopyTree(t *testing.T) {
	base := t.TempDir()
	makeStore(t, filepath.Join(base, "old"))
	if err := copyTree(filepath.Join(base, "old"), filepath.Join(base, "copy")); err != nil {
		t.Fatal(err)
	}
	checkStore(t, filepath.Join(base, "copy"))
	if err := os.Symlink("/etc/passwd", filepath.Join(base, "old", "link")); err != nil {
		t.Fatal(err)
	}
	if err := copyTree(filepath.Join(base, "old"), filepath.Join(base, "copy2")); err == nil {
		t.Error("a symbolic link was copied: want an error")
	}
}
