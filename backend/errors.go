package backend

import "errors"

// Sentinel errors; every error Open returns wraps one of them and adds what
// to do about it.
var (
	// ErrUnknownTarget: a target name no linked package registered.
	ErrUnknownTarget = errors.New("unknown device target")
	// ErrPluginNotFound: no PJRT plugin file for the target.
	ErrPluginNotFound = errors.New("PJRT plugin not found")
	// ErrNotPlugin: the file exists but is not a loadable PJRT plugin.
	ErrNotPlugin = errors.New("not a PJRT plugin")
	// ErrBadDeviceCount: a device count that is not a positive integer in range.
	ErrBadDeviceCount = errors.New("bad device count")
	// ErrBadOption: an option value the target does not accept.
	ErrBadOption = errors.New("bad backend option")
	// ErrTargetUnavailable: the target cannot run on this machine.
	ErrTargetUnavailable = errors.New("target not available on this machine")
	// ErrClient: the plugin loaded but could not create a working client.
	ErrClient = errors.New("PJRT client creation failed")
)
