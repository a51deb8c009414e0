package template

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"sigs.k8s.io/yaml"

	"github.com/kin-agents/kin/kin"
)

// Load reads the template directory dir: every regular file and directory
// under it, in lexical order (a directory before what it holds), except the
// config fragment at its top, which it parses and returns. It refuses every
// symbolic link (even one to a file inside the template), device, FIFO and
// socket, naming it; contents that are not UTF-8 text; and a template over
// the limits. It does not check placeholders (the --set values are not
// known yet: see Check). Everything is reached through an os.Root on dir,
// so nothing outside dir is read.
func Load(dir string) (kin.Template, Config, error) {
	t := kin.Template{Files: []kin.TemplateFile{}}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return kin.Template{}, Config{}, fmt.Errorf("template: %w", err)
	}
	defer root.Close()

	var cfgName string
	var cfgData []byte
	total := 0
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("template: %w", err)
		}
		if p == "." {
			return nil
		}
		if why := checkPath(p); why != "" {
			return invalid("path %q %s", p, why)
		}
		typ := d.Type()
		if typ&fs.ModeSymlink != 0 {
			return invalid("%s is a symbolic link; a template holds only regular files and directories (copy the file instead)", p)
		}
		if !typ.IsDir() && !typ.IsRegular() {
			return invalid("%s is a %s; a template holds only regular files and directories", p, kind(typ))
		}
		isConfig := p == ConfigFile || p == ConfigYAML || p == ConfigYML
		if !isConfig && len(t.Files) == MaxFiles {
			return invalid("more than %d files and directories; at most %d are allowed", MaxFiles, MaxFiles)
		}
		if typ.IsDir() {
			if isConfig {
				return invalid("%s is a directory; the config fragment must be a file", p)
			}
			fi, err := root.Lstat(p)
			if err != nil {
				return fmt.Errorf("template: %w", err)
			}
			if !fi.IsDir() {
				return invalid("%s changed while it was read", p)
			}
			t.Files = append(t.Files, kin.TemplateFile{Path: p, Dir: true, Mode: uint32(fi.Mode().Perm())})
			return nil
		}
		data, mode, err := readFile(root, p)
		if err != nil {
			return err
		}
		if isConfig {
			if cfgName != "" {
				return invalid("both %s and %s are present; keep one config fragment", cfgName, p)
			}
			cfgName, cfgData = p, data
			return nil
		}
		total += len(data)
		if total > MaxTotalSize {
			return invalid("the files are more than %d bytes in all", MaxTotalSize)
		}
		t.Files = append(t.Files, kin.TemplateFile{Path: p, Mode: uint32(mode.Perm()), Data: string(data)})
		return nil
	})
	if err != nil {
		return kin.Template{}, Config{}, err
	}
	if err := checkFiles(t.Files, true); err != nil {
		return kin.Template{}, Config{}, err
	}
	var cfg Config
	if cfgName != "" {
		if cfg, err = parseConfig(cfgName, cfgData); err != nil {
			return kin.Template{}, Config{}, err
		}
	}
	return t, cfg, nil
}

// readFile reads the regular file p of root, at most MaxFileSize bytes, and
// returns its content and mode. It opens p without blocking (in case p
// became a FIFO) and checks that what it opened is the regular file it
// found at p (os.Root follows a symbolic link inside the root).
func readFile(root *os.Root, p string) ([]byte, fs.FileMode, error) {
	li, err := root.Lstat(p)
	if err != nil {
		return nil, 0, fmt.Errorf("template: %w", err)
	}
	if !li.Mode().IsRegular() {
		return nil, 0, invalid("%s is a %s; a template holds only regular files and directories", p, kind(li.Mode().Type()))
	}
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("template: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("template: %w", err)
	}
	if !fi.Mode().IsRegular() || !os.SameFile(li, fi) {
		return nil, 0, invalid("%s changed while it was read", p)
	}
	if fi.Size() > MaxFileSize {
		return nil, 0, invalid("%s is %d bytes; at most %d are allowed per file", p, fi.Size(), MaxFileSize)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, 0, fmt.Errorf("template: %w", err)
	}
	if len(data) > MaxFileSize {
		return nil, 0, invalid("%s is more than %d bytes; at most %d are allowed per file", p, MaxFileSize, MaxFileSize)
	}
	return data, fi.Mode(), nil
}

// kind names a file type for messages.
func kind(typ fs.FileMode) string {
	switch {
	case typ&fs.ModeSymlink != 0:
		return "symbolic link"
	case typ&fs.ModeNamedPipe != 0:
		return "FIFO"
	case typ&fs.ModeSocket != 0:
		return "socket"
	case typ&fs.ModeCharDevice != 0:
		return "character device"
	case typ&fs.ModeDevice != 0:
		return "device"
	case typ.IsDir():
		return "directory"
	case typ.IsRegular():
		return "file"
	}
	return "special file"
}

// parseConfig parses the config fragment name (JSON or YAML by its name);
// unknown keys are an error.
func parseConfig(name string, data []byte) (Config, error) {
	var c Config
	if name == ConfigFile {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return Config{}, invalid("%s: %v", name, err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return Config{}, invalid("%s: data after the JSON object", name)
		}
		return c, nil
	}
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return Config{}, invalid("%s: %v", name, err)
	}
	return c, nil
}
