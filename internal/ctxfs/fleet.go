package ctxfs

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// dirFleet, at the root, holds what the hosts of a fleet hand one another
// (issue 24): results checked on a child's host for its parent's host
// (FleetHandoffDir), and what a parent's host received before it installs
// it (FleetIncomingDir). Kin's own, 0700: no agent reads or writes there.
const dirFleet = ".kin-fleet"

// FleetHandoffDir is where a child's host keeps the checked copy of the
// result of a child whose parent runs on another host, for that host to
// fetch (CopyResult's layout: result.md, refs.jsonl, artifact/).
func (l Layout) FleetHandoffDir(id string) string {
	return filepath.Join(l.Root, dirFleet, "handoff", id)
}

// FleetIncomingDir is where a parent's host unpacks a child's result
// fetched from the child's host, before CopyResult installs it in the
// parent's context/child/<name>/.
func (l Layout) FleetIncomingDir(name string) string {
	return filepath.Join(l.Root, dirFleet, "incoming", name)
}

// MakeFleetDir makes path, beneath the fleet directory, and its parents,
// kin's own (0700), following no link.
func (f *FS) MakeFleetDir(path string) error {
	comps, err := f.components(path)
	if err != nil {
		return err
	}
	if len(comps) == 0 || comps[0] != dirFleet {
		return fmt.Errorf("ctxfs: %s is not beneath %s: %w", path, dirFleet, ErrOutside)
	}
	fd, err := f.mkdirsAt(f.rootFD, comps, kinOwner, 0o700)
	if err != nil {
		return fmt.Errorf("ctxfs: %s: %w", path, err)
	}
	return unix.Close(fd)
}

// RemoveFleetDir removes path, beneath the fleet directory, and what it
// holds, following no link.
func (f *FS) RemoveFleetDir(path string) error {
	comps, err := f.components(path)
	if err != nil {
		return err
	}
	if len(comps) < 2 || comps[0] != dirFleet {
		return fmt.Errorf("ctxfs: %s is not beneath %s: %w", path, dirFleet, ErrOutside)
	}
	fd, err := walk(f.rootFD, comps[:len(comps)-1])
	if err != nil {
		return fmt.Errorf("ctxfs: %s: %w", path, err)
	}
	defer unix.Close(fd)
	return removeAllAt(fd, comps[len(comps)-1], 0)
}

// ResultLimits are CopyResult's bounds: bytes and files a result may hold.
func (f *FS) ResultLimits() (maxBytes int64, maxFiles int) { return f.maxBytes, f.maxFiles }

// MaxResultDepth bounds the nesting of a result's artifact/.
const MaxResultDepth = maxResultDepth
