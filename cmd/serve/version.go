package main

import (
	"cmp"
	"runtime"
	"runtime/debug"

	"rnnserve/server"
)

// version and commit are set by the build when the Go build information
// lacks them (a build outside a VCS checkout, such as the container
// image's: scripts/build-image.sh sets them with -ldflags '-X
// main.version=... -X main.commit=...').
var version, commit string

// buildInfo describes this binary (serve -version, the
// rnnserve_build_info metric).
func buildInfo() server.BuildInfo {
	info, _ := debug.ReadBuildInfo()
	return describeBuild(info, version, commit)
}

// describeBuild takes the version and the commit from the Go build
// information (the main module's version, the vcs.revision setting),
// else from what -ldflags set (ldVersion, ldCommit), else the version is
// the server's protocol version (server.Version) and the commit unknown.
// info may be nil.
func describeBuild(info *debug.BuildInfo, ldVersion, ldCommit string) server.BuildInfo {
	b := server.BuildInfo{GoVersion: runtime.Version()}
	if info != nil {
		if v := info.Main.Version; v != "(devel)" {
			b.Version = v
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				b.Commit = s.Value
			}
		}
		b.GoVersion = cmp.Or(info.GoVersion, b.GoVersion)
	}
	b.Version = cmp.Or(b.Version, ldVersion, server.Version)
	b.Commit = cmp.Or(b.Commit, ldCommit, "unknown")
	return b
}
