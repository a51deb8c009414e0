// Package keyring keeps the daemon's own Ed25519 signing keys on disk: one
// directory per role (the agent provider's, the person server's), a PEM
// (PKCS#8, aauth.MarshalKey's format) file per key, 0600 in a 0700 directory, and a "current" file
// naming the key new tokens are signed with. Rotating adds a key and makes it
// current; the keys it replaced stay published until every token they can
// have signed has expired.
//
// PrivateDir, ReadPrivate and WritePrivate are how every key kin keeps is
// kept (auditlog's event-log key uses them too). A ring owns the files of its
// directory and nothing else. It must never write a private key anywhere but
// its own directory, log or return one outside identity.Key, or follow a
// link planted in its directory.
package keyring

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kin-agents/kin/aauth"
	"github.com/kin-agents/kin/internal/identity"
)

// fileCurrent names the current key's kid.
const fileCurrent = "current"

// Entry is one key of a ring.
type Entry struct {
	Key     identity.Key
	Created time.Time
	// Retired is when a newer key replaced it; zero for the current key.
	Retired time.Time
}

// Ring is a role's keys. Its methods are safe for concurrent use.
type Ring struct {
	dir    string
	prefix string
	// Keep is how long a replaced key stays published (at least the
	// longest lifetime of a token it signed).
	keep time.Duration

	mu      sync.RWMutex
	entries []Entry // oldest first; the last is current
}

// Open loads the ring in dir, creating dir (0700) and a first key when there
// is none. prefix starts every kid ("ap", "ps"); keep is how long a replaced
// key stays published.
func Open(dir, prefix string, keep time.Duration, now time.Time) (*Ring, error) {
	if err := PrivateDir(dir); err != nil {
		return nil, err
	}
	r := &Ring{dir: dir, prefix: prefix, keep: keep}
	if err := r.load(); err != nil {
		return nil, err
	}
	if len(r.entries) == 0 {
		if _, err := r.Rotate(now); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func (r *Ring) load() error {
	names, err := os.ReadDir(r.dir)
	if err != nil {
		return fmt.Errorf("keyring: %w", err)
	}
	var entries []Entry
	for _, de := range names {
		kid, ok := strings.CutSuffix(de.Name(), ".pem")
		if !ok || !de.Type().IsRegular() {
			continue
		}
		data, err := ReadPrivate(filepath.Join(r.dir, de.Name()))
		if err != nil {
			return err
		}
		priv, err := aauth.ParseKey(data)
		if err != nil {
			return fmt.Errorf("keyring: %s: %w", de.Name(), err)
		}
		info, err := de.Info()
		if err != nil {
			return fmt.Errorf("keyring: %w", err)
		}
		entries = append(entries, Entry{Key: identity.Key{KID: kid, Private: priv}, Created: info.ModTime().UTC()})
	}
	cur, err := os.ReadFile(filepath.Join(r.dir, fileCurrent))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("keyring: %w", err)
	}
	slices.SortFunc(entries, func(a, b Entry) int { return a.Created.Compare(b.Created) })
	if kid := strings.TrimSpace(string(cur)); kid != "" {
		i := slices.IndexFunc(entries, func(e Entry) bool { return e.Key.KID == kid })
		if i < 0 {
			return fmt.Errorf("keyring: %s names key %q, which is not in %s", fileCurrent, kid, r.dir)
		}
		e := entries[i]
		entries = append(slices.Delete(entries, i, i+1), e)
	}
	for i := 0; i+1 < len(entries); i++ {
		entries[i].Retired = entries[i+1].Created
	}
	r.entries = entries
	return nil
}

// PrivateDir makes dir (0700) if it is missing and refuses one that is a
// link, not a directory, or that others can open. Every key kin keeps (the
// rings here, the event log's key) lives in one.
func PrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("keyring: %w", err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		if err == nil {
			err = fmt.Errorf("%s must be a directory only its owner can open (mode %v)", dir, fi.Mode())
		}
		return fmt.Errorf("keyring: %w", err)
	}
	return nil
}

// ReadPrivate reads a key file (at most 4 KiB) without following a link,
// and refuses one that is not a regular file or that others could read. A
// missing file's error wraps os.ErrNotExist.
func ReadPrivate(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("keyring: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("keyring: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("keyring: %s is %v: a key file must be a regular file only its owner can read (0600)", path, fi.Mode())
	}
	data := make([]byte, 0, 256)
	buf := make([]byte, 512)
	for len(data) < 4096 {
		n, err := f.Read(buf)
		data = append(data, buf[:n]...)
		if err != nil {
			break
		}
	}
	return data, nil
}

// Rotate makes a new current key and returns it; replaced keys older than
// keep are removed.
func (r *Ring) Rotate(now time.Time) (identity.Key, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return identity.Key{}, err
	}
	pub := priv.Public().(ed25519.PublicKey)
	kid := r.prefix + "-" + now.UTC().Format("20060102T150405Z") + "-" + identity.Thumbprint(identity.PublicJWK(pub, ""))[:8]
	data, err := aauth.MarshalKey(priv)
	if err != nil {
		return identity.Key{}, err
	}
	if err := WritePrivate(filepath.Join(r.dir, kid+".pem"), data, now); err != nil {
		return identity.Key{}, err
	}
	if err := WritePrivate(filepath.Join(r.dir, fileCurrent), []byte(kid+"\n"), now); err != nil {
		return identity.Key{}, err
	}
	key := identity.Key{KID: kid, Private: priv}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.entries); n > 0 {
		r.entries[n-1].Retired = now.UTC()
	}
	r.entries = append(r.entries, Entry{Key: key, Created: now.UTC()})
	kept := r.entries[:0]
	for _, e := range r.entries {
		if !e.Retired.IsZero() && now.Sub(e.Retired) > r.keep {
			os.Remove(filepath.Join(r.dir, e.Key.KID+".pem"))
			continue
		}
		kept = append(kept, e)
	}
	r.entries = kept
	return key, nil
}

// WritePrivate writes data to a new temporary file (0600, never through a
// link) and renames it over path, so a crash leaves the old file or the new
// one.
func WritePrivate(path string, data []byte, mtime time.Time) error {
	tmp := path + ".tmp"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("keyring: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chtimes(tmp, mtime, mtime)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("keyring: %w", err)
	}
	return nil
}

// Current returns the key new tokens are signed with.
func (r *Ring) Current() identity.Key {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.entries[len(r.entries)-1].Key
}

// Public returns the public key published under kid.
func (r *Ring) Public(kid string) (ed25519.PublicKey, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, e := range r.entries {
		if e.Key.KID == kid {
			return e.Key.Private.Public().(ed25519.PublicKey), nil
		}
	}
	return nil, fmt.Errorf("no key %q", kid)
}

// JWKS returns every published key, current last, each with alg Ed25519.
func (r *Ring) JWKS() identity.JWKS {
	r.mu.RLock()
	defer r.mu.RUnlock()
	set := identity.JWKS{Keys: make([]identity.JWK, 0, len(r.entries))}
	for _, e := range r.entries {
		set.Keys = append(set.Keys, identity.PublicJWK(e.Key.Private.Public().(ed25519.PublicKey), e.Key.KID))
	}
	return set
}

// Entries returns the ring's keys, oldest first (private keys included: for
// the daemon's own use only).
func (r *Ring) Entries() []Entry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.entries)
}

// Secret reads the random hex value kept in the file path (the operator
// token, a home's id), making one of n random bytes at the first call
// (WritePrivate, written as 2n hex characters). what names it in errors;
// a value an operator put there may be shorter, down to n characters; a
// shorter one is refused, saying to remove the file.
func Secret(path, what string, n int) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		v := strings.TrimSpace(string(b))
		if len(v) < n {
			return "", fmt.Errorf("%s %s is too short (at least %d characters); remove it to have a new one made", what, path, n)
		}
		return v, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	buf := make([]byte, n)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	v := hex.EncodeToString(buf)
	if err := WritePrivate(path, []byte(v+"\n"), time.Now()); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}
