package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// fallbackUser is the system user created to run the servers when root runs
// devstack and the postgres user does not exist.
const fallbackUser = "gwdata"

// account is the user the servers run as.
type account struct {
	name   string
	uid    uint32
	gid    uint32
	groups []uint32
	home   string
	// switchTo is set when the caller is root and the servers must run as
	// this user instead; commands then drop privileges and files are chowned.
	switchTo bool
}

// serviceAccount picks the user that runs the servers. A non-root caller runs
// them itself. Root keeps the owner of an existing cluster, else uses postgres,
// else gwdata, creating gwdata when create is set.
func serviceAccount(ctx context.Context, pgData string, create bool) (account, error) {
	if !isRoot() {
		return currentAccount(pgData)
	}
	if uid, ok := ownerUID(pgData); ok && uid != 0 {
		if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
			return accountOf(u, true)
		}
	}
	for _, name := range []string{"postgres", fallbackUser} {
		if u, err := user.Lookup(name); err == nil {
			return accountOf(u, true)
		}
	}
	if !create {
		return account{}, fmt.Errorf("cannot find a user to run the servers: neither postgres nor %s exists", fallbackUser)
	}
	if err := createSystemUser(ctx, fallbackUser); err != nil {
		return account{}, err
	}
	u, err := user.Lookup(fallbackUser)
	if err != nil {
		return account{}, fmt.Errorf("cannot look up user %s: %w", fallbackUser, err)
	}
	return accountOf(u, true)
}

// currentAccount is the caller, who must own the cluster when one exists.
func currentAccount(pgData string) (account, error) {
	u, err := user.Current()
	if err != nil {
		return account{}, fmt.Errorf("cannot look up current user: %w", err)
	}
	a, err := accountOf(u, false)
	if err != nil {
		return account{}, err
	}
	if uid, ok := ownerUID(pgData); ok && uid != a.uid {
		return account{}, fmt.Errorf("cannot use %s: it belongs to uid %d, not to you (uid %d); it was made by another user (root runs hand it to postgres or %s), so run devstack as root or remove .data with make clean-data", pgData, uid, a.uid, fallbackUser)
	}
	return a, nil
}

func accountOf(u *user.User, switchTo bool) (account, error) {
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return account{}, fmt.Errorf("cannot parse uid %q of user %s: %w", u.Uid, u.Username, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return account{}, fmt.Errorf("cannot parse gid %q of user %s: %w", u.Gid, u.Username, err)
	}
	a := account{name: u.Username, uid: uint32(uid), gid: uint32(gid), home: u.HomeDir, switchTo: switchTo}
	ids, err := u.GroupIds()
	if err != nil {
		return account{}, fmt.Errorf("cannot list groups of user %s: %w", u.Username, err)
	}
	for _, id := range ids {
		if g, err := strconv.ParseUint(id, 10, 32); err == nil {
			a.groups = append(a.groups, uint32(g))
		}
	}
	return a, nil
}

func createSystemUser(ctx context.Context, name string) error {
	logf("creating system user %s to run the servers (PostgreSQL refuses to run as root)", name)
	cmd := exec.CommandContext(ctx, "useradd", "--system", "--user-group", "--no-create-home",
		"--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name)
	if _, err := runOutput(cmd); err != nil {
		return fmt.Errorf("cannot create system user %s: %w", name, err)
	}
	return nil
}

// command prepares a program to run as the account, in dir.
func (a account) command(ctx context.Context, dir, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if a.switchTo {
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: a.groups},
		}
		cmd.Env = append(os.Environ(), "HOME="+a.home, "USER="+a.name, "LOGNAME="+a.name)
	}
	return cmd
}

// ensureDir creates dir when missing and, when the servers run as another
// user, hands it and everything in it to that user.
func (a account) ensureDir(dir string, perm fs.FileMode) error {
	if err := os.MkdirAll(dir, perm); err != nil {
		return fmt.Errorf("cannot create %s: %w", dir, err)
	}
	return a.ownTree(dir)
}

// ownTree chowns path and, for a directory, everything in it to the account
// when the servers run as another user.
func (a account) ownTree(path string) error {
	if !a.switchTo {
		return nil
	}
	err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			err = a.own(p, d)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed while walking
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("cannot hand %s to user %s: %w", path, a.name, err)
	}
	return nil
}

// own chowns one entry to the account unless it already belongs to it.
func (a account) own(path string, d fs.DirEntry) error {
	info, err := d.Info()
	if err != nil {
		return err
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Uid == a.uid && st.Gid == a.gid {
		return nil
	}
	return os.Lchown(path, int(a.uid), int(a.gid))
}

// checkTraverse fails when the account cannot reach dir, that is when some
// directory from / down to dir is not searchable by it.
func (a account) checkTraverse(dir string) error {
	if !a.switchTo {
		return nil
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("cannot resolve %s: %w", dir, err)
	}
	for p := real; ; p = filepath.Dir(p) {
		info, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("cannot inspect %s: %w", p, err)
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if ok && !a.canSearch(info.Mode(), st.Uid, st.Gid) {
			return fmt.Errorf("cannot run the servers as user %s: it may not enter %s (mode %s, owner uid %d); "+
				"PostgreSQL refuses root, so every directory above .data must be searchable by %s: "+
				"run chmod o+x on that directory, move the checkout, or run devstack as a normal user",
				a.name, p, info.Mode(), st.Uid, a.name)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// canSearch reports whether the account may enter a directory with the given
// mode and owner, by the classic owner, group, other permission bits.
func (a account) canSearch(mode fs.FileMode, uid, gid uint32) bool {
	perm := mode.Perm()
	switch {
	case a.uid == 0:
		return true
	case uid == a.uid:
		return perm&0o100 != 0
	case a.inGroup(gid):
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

func (a account) inGroup(gid uint32) bool {
	return gid == a.gid || slices.Contains(a.groups, gid)
}

// ownerUID returns the owner of path, when path exists.
func ownerUID(path string) (uint32, bool) {
	info, err := os.Stat(path)
	if err != nil {
		return 0, false
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}

// isRoot reports whether devstack runs as root.
func isRoot() bool { return os.Geteuid() == 0 }
