package workspace

import (
	"fmt"
	"slices"
)

// App is one app of a workspace: a port its command serves HTTP on, with
// an origin of its own (package api, apps.go) and a share level. The
// default app, DefaultApp ("main"), is the one on $PORT: it is always
// there, and an entry of that name (with no port) only sets its share
// level. Spec.Apps lists the others (and main if its share is set).
type App struct {
	Name  string `json:"name"`
	Port  int    `json:"port,omitempty"`  // 1–65535; 0 for main ($PORT)
	Share Share  `json:"share,omitempty"` // "" = ShareOwner
	// URL is the app's own origin (filled by the API; "" if the server
	// has no apps domain or its host makes no DNS label). Never stored.
	URL string `json:"url,omitempty"`
}

// Share is who may open an app.
type Share string

const (
	// ShareOwner: the workspace's owner (and admins), after the app login.
	ShareOwner Share = "owner"
	// ShareAuthenticated: any user of this server, after the app login.
	ShareAuthenticated Share = "authenticated"
	// SharePublic: anyone, without a login.
	SharePublic Share = "public"
)

// Level is s with the default filled in ("" = ShareOwner).
func (s Share) Level() Share {
	if s == "" {
		return ShareOwner
	}
	return s
}

// DefaultApp is the name of the app on $PORT.
const DefaultApp = "main"

// MaxApps bounds the apps of a workspace (main included); MaxAppNameLen an
// app's name.
const (
	MaxApps       = 16
	MaxAppNameLen = 20
)

// ValidAppName checks an app name: 1–20 characters of a–z, 0–9 and '-',
// neither starting nor ending with '-' and without "--" (an app's host
// label is {app}--{workspace}--{owner}).
func ValidAppName(name string) error {
	ok := name != "" && len(name) <= MaxAppNameLen && name[0] != '-' && name[len(name)-1] != '-'
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && name[i-1] != '-'
	}
	if !ok {
		return fmt.Errorf("%w: app name %q: want 1–%d characters of a–z, 0–9 and '-', not starting or ending with '-', without \"--\"", ErrBadInput, name, MaxAppNameLen)
	}
	return nil
}

// validApps checks apps: names, ports, share levels, no name or port twice.
func validApps(apps []App) error {
	if len(apps) > MaxApps {
		return fmt.Errorf("%w: %d apps, at most %d", ErrBadInput, len(apps), MaxApps)
	}
	names, ports := map[string]bool{}, map[int]bool{}
	for _, a := range apps {
		if err := validApp(a); err != nil {
			return err
		}
		switch {
		case names[a.Name]:
			return fmt.Errorf("%w: app %s given twice", ErrBadInput, a.Name)
		case a.Port != 0 && ports[a.Port]:
			return fmt.Errorf("%w: app %s: port %d is another app's", ErrBadInput, a.Name, a.Port)
		}
		names[a.Name], ports[a.Port] = true, true
	}
	return nil
}

// validApp checks one app: its name, port and share level.
func validApp(a App) error {
	if err := ValidAppName(a.Name); err != nil {
		return err
	}
	switch {
	case a.Name == DefaultApp && a.Port != 0:
		return fmt.Errorf("%w: app %s is the one on $PORT: give it no port (only a share level)", ErrBadInput, a.Name)
	case a.Name != DefaultApp && (a.Port < 1 || a.Port > 65535):
		return fmt.Errorf("%w: app %s: port %d, want 1–65535", ErrBadInput, a.Name, a.Port)
	case a.Share != "" && a.Share != ShareOwner && a.Share != ShareAuthenticated && a.Share != SharePublic:
		return fmt.Errorf("%w: app %s: share %q, want owner, authenticated or public", ErrBadInput, a.Name, a.Share)
	}
	return nil
}

// App is the app of s named name (main is always one), and whether it is.
func (s Spec) App(name string) (App, bool) {
	for _, a := range s.Apps {
		if a.Name == name {
			a.Share = a.Share.Level()
			return a, true
		}
	}
	if name == DefaultApp {
		return App{Name: DefaultApp, Share: ShareOwner}, true
	}
	return App{}, false
}

// AllApps is s's apps, main first, share levels filled in, URLs cleared.
func (s Spec) AllApps() []App {
	main, _ := s.App(DefaultApp)
	out := []App{main}
	for _, a := range s.Apps {
		if a.Name != DefaultApp {
			a.Share, a.URL = a.Share.Level(), ""
			out = append(out, a)
		}
	}
	return out
}

// AppPorts are the ports s's apps declare (main's, $PORT, is not one).
func (s Spec) AppPorts() []int {
	var ports []int
	for _, a := range s.Apps {
		if a.Port != 0 {
			ports = append(ports, a.Port)
		}
	}
	return ports
}

// editApps returns apps with set's entries replacing or adding theirs (by
// name) and unset's names removed, in a new slice (nil when empty).
func editApps(apps, set []App, unset []string) []App {
	if len(set) == 0 && len(unset) == 0 {
		return apps
	}
	var out []App
	for _, a := range apps {
		if !slices.Contains(unset, a.Name) && !slices.ContainsFunc(set, func(b App) bool { return b.Name == a.Name }) {
			out = append(out, a)
		}
	}
	return append(out, set...)
}

// StoredApps is apps as stored: no URLs, nil when empty.
func StoredApps(apps []App) []App {
	if len(apps) == 0 {
		return nil
	}
	out := make([]App, len(apps))
	for i, a := range apps {
		a.URL = ""
		out[i] = a
	}
	return out
}
