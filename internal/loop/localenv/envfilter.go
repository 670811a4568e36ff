package localenv

import (
	"os"
	"sort"
	"strings"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// coreVars are inherited under tool.EnvInheritCore.
var coreVars = map[string]bool{
	"PATH": true, "HOME": true, "USER": true, "LOGNAME": true, "SHELL": true,
	"LANG": true, "LANGUAGE": true, "TERM": true, "TMPDIR": true, "TZ": true,
	"HOSTNAME": true, "COLORTERM": true, "EDITOR": true, "PAGER": true,
	"GOPATH": true, "GOROOT": true, "GOCACHE": true, "GOMODCACHE": true, "GOFLAGS": true,
	"GOPROXY": true, "GONOSUMDB": true, "GOPRIVATE": true, "GOTOOLCHAIN": true,
	"CARGO_HOME": true, "RUSTUP_HOME": true,
	"NVM_DIR": true, "NODE_PATH": true, "NPM_CONFIG_PREFIX": true,
	"PYENV_ROOT": true, "VIRTUAL_ENV": true, "PYTHONPATH": true, "CONDA_PREFIX": true,
	"JAVA_HOME": true, "GEM_HOME": true, "GEM_PATH": true, "RBENV_ROOT": true,
	"SSL_CERT_FILE": true, "SSL_CERT_DIR": true,
	"XDG_CACHE_HOME": true, "XDG_CONFIG_HOME": true, "XDG_DATA_HOME": true,
}

var sensitiveSuffixes = []string{"_API_KEY", "_SECRET", "_TOKEN", "_PASSWORD", "_CREDENTIAL", "_CREDENTIALS"}

// IsSensitive reports whether an environment variable name matches
// *_API_KEY, *_SECRET, *_TOKEN, *_PASSWORD or *_CREDENTIAL(S)
// (case-insensitive). Such variables are never inherited.
func IsSensitive(name string) bool {
	u := strings.ToUpper(name)
	for _, s := range sensitiveSuffixes {
		if strings.HasSuffix(u, s) || u == s[1:] {
			return true
		}
	}
	return false
}

// isCore reports whether name is inherited under the core policy.
func isCore(name string) bool {
	return coreVars[name] || strings.HasPrefix(name, "LC_")
}

// FilterEnv applies policy to base ("KEY=value" entries), then adds extra on
// top (extra is the caller's explicit choice and is not filtered). The
// result is sorted for reproducibility.
func FilterEnv(base []string, policy tool.EnvPolicy, extra map[string]string) []string {
	m := map[string]string{}
	if policy != tool.EnvInheritNone {
		for _, kv := range base {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" || IsSensitive(k) {
				continue
			}
			if policy == tool.EnvInheritAll || isCore(k) {
				m[k] = v
			}
		}
	}
	for k, v := range extra {
		m[k] = v
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func (e *Env) baseEnv() []string {
	if e.cfg.baseEnvSet {
		return e.cfg.baseEnv
	}
	return os.Environ()
}
