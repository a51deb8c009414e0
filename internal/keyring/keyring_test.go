package keyring

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func TestOpenCreatesAPrivateKeyAndReopensIt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys", "ap")
	r, err := Open(dir, "ap", 25*time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	cur := r.Current()
	if !strings.HasPrefix(cur.KID, "ap-20261121T120000Z-") {
		t.Fatalf("kid %q", cur.KID)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, cur.KID+".pem"): 0o600} {
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s: %v, %v; want mode %v", path, fi.Mode(), err, want)
		}
	}
	again, err := Open(dir, "ap", 25*time.Hour, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got := again.Current(); got.KID != cur.KID || !got.Private.Equal(cur.Private) {
		t.Fatalf("reopened ring's current key is %s, want %s", got.KID, cur.KID)
	}
	set := again.JWKS()
	if len(set.Keys) != 1 || set.Keys[0].Alg != "Ed25519" || set.Keys[0].KID != cur.KID {
		t.Fatalf("JWKS = %+v", set)
	}
}

func TestRotateKeepsTheOldKeyPublishedThenDropsIt(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	r, err := Open(dir, "ps", 25*time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	first := r.Current()
	second, err := r.Rotate(t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if r.Current().KID != second.KID || len(r.JWKS().Keys) != 2 {
		t.Fatalf("after rotation: current %s, %d published keys", r.Current().KID, len(r.JWKS().Keys))
	}
	if _, err := r.Public(first.KID); err != nil {
		t.Fatalf("the replaced key is not published: %v", err)
	}
	reopened, err := Open(dir, "ps", 25*time.Hour, t0.Add(2*time.Hour))
	if err != nil || reopened.Current().KID != second.KID || len(reopened.JWKS().Keys) != 2 {
		t.Fatalf("reopened after rotation: %v", err)
	}
	third, err := r.Rotate(t0.Add(27 * time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Public(first.KID); err == nil {
		t.Fatal("a key replaced 26 h ago is still published (keep is 25 h)")
	}
	if _, err := os.Stat(filepath.Join(dir, first.KID+".pem")); !os.IsNotExist(err) {
		t.Fatalf("the dropped key's file is still there: %v", err)
	}
	if r.Current().KID != third.KID || len(r.JWKS().Keys) != 2 {
		t.Fatalf("current %s, published %d", r.Current().KID, len(r.JWKS().Keys))
	}
}

func TestOpenRefusesExposedOrLinkedKeys(t *testing.T) {
	mk := func(t *testing.T) (string, string) {
		dir := t.TempDir()
		os.Chmod(dir, 0o700)
		r, err := Open(dir, "ap", time.Hour, t0)
		if err != nil {
			t.Fatal(err)
		}
		return dir, filepath.Join(dir, r.Current().KID+".pem")
	}
	t.Run("readable by others", func(t *testing.T) {
		dir, key := mk(t)
		os.Chmod(key, 0o644)
		if _, err := Open(dir, "ap", time.Hour, t0); err == nil || !strings.Contains(err.Error(), "0600") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a link", func(t *testing.T) {
		dir, key := mk(t)
		other := filepath.Join(t.TempDir(), "x.pem")
		os.Rename(key, other)
		os.Symlink(other, key)
		if _, err := Open(dir, "ap", time.Hour, t0); err == nil {
			t.Fatal("a key file that is a link was followed")
		}
	})
	t.Run("open directory", func(t *testing.T) {
		dir, _ := mk(t)
		os.Chmod(dir, 0o755)
		if _, err := Open(dir, "ap", time.Hour, t0); err == nil {
			t.Fatal("a directory others can open was accepted")
		}
	})
	t.Run("current names a missing key", func(t *testing.T) {
		dir, _ := mk(t)
		os.WriteFile(filepath.Join(dir, fileCurrent), []byte("nope\n"), 0o600)
		if _, err := Open(dir, "ap", time.Hour, t0); err == nil || !strings.Contains(err.Error(), "nope") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("not PEM", func(t *testing.T) {
		dir, key := mk(t)
		os.WriteFile(key, []byte("hello"), 0o600)
		if _, err := Open(dir, "ap", time.Hour, t0); err == nil || !strings.Contains(err.Error(), "not a PEM") {
			t.Fatalf("err = %v", err)
		}
	})
}
