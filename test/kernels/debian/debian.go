// SPDX-License-Identifier: Apache-2.0

// Package debian fetches Debian's cloud kernels for the kernel matrix with a
// private apt configuration (the system's sources, lists and cache stay
// untouched) and keeps the packages and their unpacked trees in a cache
// directory that outlives the run, so a machine downloads each kernel once.
package debian

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Kernel is one column of the matrix: a Debian suite's cloud kernel.
type Kernel struct {
	Name  string // what -kernel selects, e.g. "6.1"
	Suite string // Debian suite whose linux-image-cloud-amd64 picks the kernel
}

// Kernels is the matrix, oldest first. sid follows Debian's newest kernel (7.x
// when this was written), so its name stays "sid".
var Kernels = []Kernel{
	{Name: "5.10", Suite: "bullseye"},
	{Name: "6.1", Suite: "bookworm"},
	{Name: "6.12", Suite: "trixie"},
	{Name: "sid", Suite: "sid"},
}

// Lookup finds a kernel by name or suite.
func Lookup(name string) (Kernel, bool) {
	for _, k := range Kernels {
		if k.Name == name || k.Suite == name {
			return k, true
		}
	}
	return Kernel{}, false
}

// Image is an unpacked kernel: its vmlinuz and its modules.
type Image struct {
	Kernel
	Release    string // uname -r
	Version    string // Debian package version
	Vmlinuz    string
	ModulesDir string
	Packages   []string // .deb files it came from
	DebBytes   int64    // their total size
}

// Cache holds the private apt state, the downloaded packages and the unpacked
// kernels under Dir.
type Cache struct {
	Dir    string
	Mirror string // Debian archive URI, e.g. from MirrorFromSystem
	// MaxListAge is how old the package lists may get before they are
	// refreshed; a failed refresh falls back to what was fetched before.
	MaxListAge time.Duration
	Log        *slog.Logger
}

const metaPackage = "linux-image-cloud-amd64"

// Fetch returns the unpacked kernel of k, downloading it if the cache does
// not have the one the suite currently points at.
func (c *Cache) Fetch(ctx context.Context, k Kernel) (*Image, error) {
	unlock, err := c.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	refreshErr := c.refreshLists(ctx)
	release, version, err := c.resolve(ctx, k.Suite)
	if err != nil {
		// Offline, or the mirror moved on: reuse the kernel of the last run.
		release, version, err = c.remembered(k.Suite)
		if err != nil {
			return nil, fmt.Errorf("kernel %s: no cached kernel and apt cannot resolve one: %w", k.Name, errors.Join(refreshErr, err))
		}
		c.Log.Warn("using cached kernel", "kernel", k.Name, "release", release, "apt", refreshErr)
	}
	img := &Image{Kernel: k, Release: release, Version: version}
	root := filepath.Join(c.Dir, "kernels", release)
	if _, err := os.Stat(filepath.Join(root, ".complete")); err != nil {
		if err := c.download(ctx, k.Suite, release, root); err != nil {
			return nil, fmt.Errorf("kernel %s (%s): %w", k.Name, release, err)
		}
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "suites", k.Suite), []byte(release+" "+version+"\n"), 0o644); err != nil {
		return nil, err
	}
	if err := c.prune(); err != nil {
		c.Log.Warn("pruning old kernels", "err", err)
	}
	return img, img.locate(root)
}

// prune removes kernels and packages that no suite points at any more, so
// the cache does not grow with every Debian kernel update.
func (c *Cache) prune() error {
	var current []string
	for _, k := range Kernels {
		if release, _, err := c.remembered(k.Suite); err == nil {
			current = append(current, release)
		}
	}
	inUse := func(name string) bool {
		for _, r := range current {
			if strings.Contains(name, r) {
				return true
			}
		}
		return false
	}
	var errs []error
	for _, dir := range []string{"kernels", "debs"} {
		entries, err := os.ReadDir(filepath.Join(c.Dir, dir))
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !inUse(e.Name()) {
				errs = append(errs, os.RemoveAll(filepath.Join(c.Dir, dir, e.Name())))
			}
		}
	}
	return errors.Join(errs...)
}

// lock serializes runs that share the cache (CI jobs, parallel kernels).
func (c *Cache) lock() (func(), error) {
	for _, d := range []string{"apt/lists/partial", "apt/cache/archives/partial", "debs", "kernels", "suites"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(filepath.Join(c.Dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", c.Dir, err)
	}
	return func() { f.Close() }, nil
}

// aptArgs point apt at our own sources list, lists and cache; nothing of the
// system's apt state is read or written besides its configuration defaults.
func (c *Cache) aptArgs() []string {
	apt := filepath.Join(c.Dir, "apt")
	return []string{
		"-q",
		"-o", "Dir::Etc::sourcelist=" + filepath.Join(apt, "sources.list"),
		"-o", "Dir::Etc::sourceparts=/nonexistent",
		"-o", "Dir::State::Lists=" + filepath.Join(apt, "lists"),
		"-o", "Dir::Cache=" + filepath.Join(apt, "cache"),
		// Keep apt's binary cache (images often disable it): it turns each
		// apt-cache call from seconds into a tenth of one.
		"-o", "Dir::Cache::pkgcache=pkgcache.bin",
		"-o", "Dir::Cache::srcpkgcache=srcpkgcache.bin",
		"-o", "APT::Get::List-Cleanup=false",
		"-o", "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false",
	}
}

func (c *Cache) apt(ctx context.Context, dir, tool string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, tool, append(c.aptArgs(), args...)...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// SourcesList is the private sources list: every suite of the matrix from
// one mirror, verified with Debian's archive keyring.
func SourcesList(mirror string) string {
	var b strings.Builder
	for _, k := range Kernels {
		fmt.Fprintf(&b, "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n", mirror, k.Suite)
	}
	return b.String()
}

func (c *Cache) refreshLists(ctx context.Context) error {
	sources := filepath.Join(c.Dir, "apt", "sources.list")
	want := SourcesList(c.Mirror)
	old, _ := os.ReadFile(sources)
	st, err := os.Stat(filepath.Join(c.Dir, "apt", "updated"))
	if string(old) == want && err == nil && time.Since(st.ModTime()) < c.MaxListAge {
		return nil
	}
	if err := os.WriteFile(sources, []byte(want), 0o644); err != nil {
		return err
	}
	c.Log.Info("refreshing Debian package lists", "suites", len(Kernels))
	if _, err := c.apt(ctx, c.Dir, "apt-get", "update"); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.Dir, "apt", "updated"), nil, 0o644)
}

// resolve asks which kernel release the suite's cloud meta-package depends on.
func (c *Cache) resolve(ctx context.Context, suite string) (release, version string, err error) {
	out, err := c.apt(ctx, c.Dir, "apt-cache", "show", metaPackage+"/"+suite)
	if err != nil {
		return "", "", err
	}
	return ParseMeta(out)
}

// ParseMeta reads the kernel release and version from the meta-package's
// apt-cache record (the first one, if apt printed several).
func ParseMeta(record string) (release, version string, err error) {
	sc := bufio.NewScanner(strings.NewReader(record))
	for sc.Scan() {
		line := sc.Text()
		if line == "" && version != "" {
			break
		}
		if v, ok := strings.CutPrefix(line, "Version: "); ok {
			version = v
		}
		deps, ok := strings.CutPrefix(line, "Depends: ")
		if !ok {
			continue
		}
		for _, d := range strings.Split(deps, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(d), " ")
			if r, ok := strings.CutPrefix(name, "linux-image-"); ok && release == "" {
				release = r
			}
		}
	}
	if release == "" || version == "" {
		return "", "", fmt.Errorf("%s record names no linux-image dependency", metaPackage)
	}
	return release, version, nil
}

func (c *Cache) remembered(suite string) (release, version string, err error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, "suites", suite))
	if err != nil {
		return "", "", err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return "", "", fmt.Errorf("corrupt cache record for %s: %q", suite, b)
	}
	return f[0], f[1], nil
}

// PackageSets are the ways Debian has shipped a kernel release, in order of
// preference: one unsigned image package with vmlinuz and modules (up to
// trixie), or separate unsigned binary and modules packages (sid's 7.x).
func PackageSets(release string) [][]string {
	return [][]string{
		{"linux-image-" + release + "-unsigned"},
		{"linux-binary-unsigned-" + release, "linux-modules-" + release},
	}
}

func (c *Cache) download(ctx context.Context, suite, release, root string) error {
	var pkgs []string
	for _, set := range PackageSets(release) {
		ok := true
		for _, p := range set {
			if _, err := c.apt(ctx, c.Dir, "apt-cache", "show", p+"/"+suite); err != nil {
				ok = false
			}
		}
		if ok {
			pkgs = set
			break
		}
	}
	if pkgs == nil {
		return fmt.Errorf("none of the package sets %v exists in %s", PackageSets(release), suite)
	}
	debs := filepath.Join(c.Dir, "debs")
	specs := make([]string, len(pkgs))
	for i, p := range pkgs {
		specs[i] = p + "/" + suite
	}
	c.Log.Info("downloading kernel", "suite", suite, "packages", pkgs)
	if _, err := c.apt(ctx, debs, "apt-get", append([]string{"download"}, specs...)...); err != nil {
		return err
	}
	tmp := root + ".partial"
	_ = os.RemoveAll(tmp)
	for _, p := range pkgs {
		files, _ := filepath.Glob(filepath.Join(debs, p+"_*.deb"))
		if len(files) == 0 {
			return fmt.Errorf("apt-get download left no %s package", p)
		}
		if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", files[len(files)-1], tmp).CombinedOutput(); err != nil {
			return fmt.Errorf("unpacking %s: %w: %s", files[len(files)-1], err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(strings.Join(pkgs, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	_ = os.RemoveAll(root)
	return os.Rename(tmp, root)
}

// locate finds vmlinuz and the modules directory in the unpacked tree, and
// the packages it came from.
func (img *Image) locate(root string) error {
	for _, dir := range []string{"lib/modules", "usr/lib/modules"} {
		if d := filepath.Join(root, dir, img.Release); isDir(d) {
			img.ModulesDir = d
		}
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), "vmlinuz") {
			img.Vmlinuz = p
		}
		return err
	})
	if err != nil {
		return err
	}
	if img.Vmlinuz == "" || img.ModulesDir == "" {
		return fmt.Errorf("kernel %s: no vmlinuz or modules directory in %s", img.Release, root)
	}
	pkgs, err := os.ReadFile(filepath.Join(root, ".complete"))
	if err != nil {
		return err
	}
	for _, p := range strings.Fields(string(pkgs)) {
		files, _ := filepath.Glob(filepath.Join(filepath.Dir(filepath.Dir(root)), "debs", p+"_*.deb"))
		for _, f := range files {
			if st, err := os.Stat(f); err == nil {
				img.Packages = append(img.Packages, f)
				img.DebBytes += st.Size()
			}
		}
	}
	return nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// MirrorFromSystem returns the Debian archive URI the machine's own apt
// sources use (one-line or deb822 format), so the matrix downloads from the
// mirror this machine is meant to reach.
func MirrorFromSystem() (string, error) {
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	more, _ := filepath.Glob("/etc/apt/sources.list.d/*.list")
	files = append(append([]string{"/etc/apt/sources.list"}, files...), more...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if m := FindMirror(string(b)); m != "" {
			return m, nil
		}
	}
	return "", errors.New("no Debian archive in /etc/apt/sources.list*; pass -mirror")
}

// FindMirror returns the first URI in an apt sources file whose path ends in
// /debian (the main archive, not -security or a third-party repository).
func FindMirror(sources string) string {
	for _, line := range strings.Split(sources, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			continue
		}
		var fields []string
		if rest, ok := strings.CutPrefix(line, "URIs:"); ok {
			fields = strings.Fields(rest)
		} else if rest, ok := strings.CutPrefix(line, "deb "); ok {
			fields = strings.Fields(rest)
		}
		for _, f := range fields {
			if strings.Contains(f, "://") && strings.HasSuffix(strings.TrimSuffix(f, "/"), "/debian") {
				return strings.TrimSuffix(f, "/")
			}
		}
	}
	return ""
}
