package launch

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// RunJSON runs a command and returns the last line of its stdout that is
// a JSON object; on failure, the error carries the end of its stderr.
func RunJSON(ctx context.Context, limit time.Duration, exe string, args, env []string, stderr io.Writer) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	tail := &tailBuffer{max: 2048}
	cmd.Stdout = &out
	cmd.Stderr = tail
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return nil, fmt.Errorf("%s did not finish within %v", filepath.Base(exe), limit)
	}
	if err != nil {
		msg := string(bytes.TrimSpace(tail.Bytes()))
		return nil, fmt.Errorf("%s %s: %v: %s", filepath.Base(exe), strings.Join(args[:min(len(args), 1)], " "), err, msg)
	}
	var last []byte
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		if l := bytes.TrimSpace(sc.Bytes()); len(l) > 0 && l[0] == '{' {
			last = slices.Clone(l)
		}
	}
	if last == nil {
		return nil, fmt.Errorf("%s printed no JSON summary", filepath.Base(exe))
	}
	return last, nil
}
