package localenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxScanBytes caps the bytes of the lines a ranged read of a file
// above the read cap returns (seed 002 FR-LIM-05 max_read_file_scan_bytes).
const DefaultMaxScanBytes = 2 << 20

// ErrScanLimit is wrapped by ReadFile errors for ranged reads whose selected
// lines exceed the scan cap.
var ErrScanLimit = errors.New("selected lines exceed the scan limit")

// readRange streams r (a file of size bytes, above the read cap) and returns
// lines [offset, offset+limit) (1-based; limit 0 means to the end), the
// file's total line count and whether its first 8 KiB look binary. Memory is
// bounded by maxScan (the selected bytes) plus a fixed buffer whatever the
// file size; ctx is checked every 64 KiB.
func readRange(ctx context.Context, r io.Reader, offset, limit int, maxScan int64) (sel []byte, total int, binary bool, err error) {
	if offset < 1 {
		offset = 1
	}
	br := bufio.NewReaderSize(r, 64<<10)
	sniff, _ := br.Peek(sniffLen)
	binary = looksBinary(sniff)
	line := 1 // number of the line the next byte belongs to
	var read int64
	lastByte := byte('\n')
	for {
		chunk, rerr := br.ReadSlice('\n')
		if len(chunk) > 0 {
			read += int64(len(chunk))
			if read/(64<<10) != (read-int64(len(chunk)))/(64<<10) {
				if cerr := ctx.Err(); cerr != nil {
					return nil, 0, false, fmt.Errorf("scan: %w", cerr)
				}
			}
			if line >= offset && (limit <= 0 || line < offset+limit) {
				if int64(len(sel)+len(chunk)) > maxScan {
					return nil, 0, false, fmt.Errorf("%w: the selected lines are more than %d bytes; read fewer lines (a smaller limit)", ErrScanLimit, maxScan)
				}
				sel = append(sel, chunk...)
			}
			lastByte = chunk[len(chunk)-1]
			if lastByte == '\n' {
				line++
			}
		}
		switch {
		case rerr == nil, errors.Is(rerr, bufio.ErrBufferFull):
			continue
		case errors.Is(rerr, io.EOF):
			total = line - 1
			if lastByte != '\n' {
				total++
			}
			if sel == nil {
				sel = []byte{}
			}
			return sel, total, binary, nil
		default:
			return nil, 0, false, fmt.Errorf("scan: %w", rerr)
		}
	}
}
