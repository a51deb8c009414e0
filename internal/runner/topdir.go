package runner

import (
	"os"

	"github.com/kin-agents/kin/internal/ctxfs"
)

// spreadSubdirs sets FS_TOPDIR_FL on dir (ctxfs.SpreadSubdirs): each of its
// new subdirectories goes to a block group of the allocator's choosing.
func spreadSubdirs(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return ctxfs.SpreadSubdirs(int(f.Fd()))
}
