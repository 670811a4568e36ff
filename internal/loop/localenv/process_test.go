package localenv

import (
	"bufio"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/proctest"
)

func TestStartStdio(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOME_API_KEY", "leak")
	e, err := New(root, WithKillGrace(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	tests := []struct {
		name    string
		argv    []string
		env     map[string]string
		dir     string
		input   string
		want    string
		wantErr string // "" : a clean exit (io.EOF)
	}{
		{name: "cat", argv: []string{"cat"}, input: "a\nb\n", want: "a\nb\n"},
		{name: "env, filtered env and directory", argv: []string{"sh", "-c", `echo "$X:${SOME_API_KEY:-unset}"; basename "$(pwd)"`},
			env: map[string]string{"X": "y"}, dir: "sub", want: "y:unset\nsub\n"},
		{name: "exit code and stderr", argv: []string{"sh", "-c", "echo out; echo why >&2; exit 7"}, want: "out\n",
			wantErr: "exited with code 7; its stderr ends with: why"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := e.StartStdio(t.Context(), tt.argv, tt.env, tt.dir)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if _, err := io.WriteString(p, tt.input); err != nil {
				t.Fatal(err)
			}
			p.(stdioProcess).CloseStdin()
			var got []byte
			buf := make([]byte, 1024)
			for {
				n, err := p.Read(buf)
				got = append(got, buf[:n]...)
				if err != nil {
					var exit *ProcessExit
					if tt.wantErr == "" && (!errors.As(err, &exit) || !errors.Is(err, io.EOF)) {
						t.Errorf("end = %v, want a clean exit", err)
					}
					if tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr) {
						t.Errorf("end = %v, want %q", err, tt.wantErr)
					}
					break
				}
			}
			if string(got) != tt.want {
				t.Errorf("stdout = %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := e.StartStdio(t.Context(), []string{"cat"}, nil, "../.."); !errors.Is(err, tool.ErrPathEscapes) {
		t.Errorf("working directory outside the root = %v, want ErrPathEscapes", err)
	}
}

func TestProcessCloseKillsTheGroup(t *testing.T) {
	e, err := New(t.TempDir(), WithKillGrace(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	p, err := e.StartProcess(t.Context(), []string{"sh", "-c", `trap "" TERM; sleep 300 & echo $!; wait`}, ProcessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(p).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	for _, pid := range []int{p.Pid(), child} {
		if !proctest.Gone(pid, 5*time.Second) {
			t.Errorf("process %d survived Close", pid)
		}
	}
	if code := p.ExitCode(); code != 128+9 {
		t.Errorf("exit code = %d, want 137 (SIGKILL after the ignored SIGTERM)", code)
	}
}
