package pytorch

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
)

// pickleWriter writes the opcodes the pickles of these tests are made of.
type pickleWriter struct{ strings.Builder }

// str writes s as BINUNICODE.
func (b *pickleWriter) str(s string) {
	b.WriteByte('X')
	binary.Write(b, binary.LittleEndian, uint32(len(s)))
	b.WriteString(s)
}

// tuple writes a tuple of v as BININTs.
func (b *pickleWriter) tuple(v ...int) {
	b.WriteByte('(')
	for _, x := range v {
		b.WriteByte('J')
		binary.Write(b, binary.LittleEndian, int32(x))
	}
	b.WriteByte('t')
}

// rebuild writes the call of _rebuild_tensor_v2 for a float32 tensor over
// storage "0" of numel elements, without its size and stride.
func (b *pickleWriter) rebuild(numel int) {
	b.WriteString("ctorch._utils\n_rebuild_tensor_v2\n((")
	b.str("storage")
	b.WriteString("ctorch\nFloatStorage\n")
	b.str("0")
	b.str("cpu")
	b.WriteByte('J')
	binary.Write(b, binary.LittleEndian, int32(numel))
	b.WriteString("tQK\x00")
}

// tensorPickle is a protocol-2 pickle of a dict holding one float32
// tensor "w" of the given size (and contiguous strides) over storage "0",
// nested under "state_dict" depth times.
func tensorPickle(size []int, depth int) string {
	var b pickleWriter
	b.WriteString("\x80\x02")
	for range depth {
		b.WriteByte('}')
		b.str("state_dict")
	}
	b.WriteByte('}')
	b.str("w")
	b.rebuild(1)
	b.tuple(size...)
	stride := make([]int, len(size))
	for i := range stride {
		stride[i] = 1
	}
	b.tuple(stride...)
	b.WriteString("\x89}tRs")
	for range depth {
		b.WriteByte('s')
	}
	b.WriteByte('.')
	return b.String()
}

// zipCheckpoint is a zip checkpoint of the pickle pkl and the given
// storage records, stored as torch.save stores them.
func zipCheckpoint(t *testing.T, pkl string, records map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	put := func(name string, data []byte) {
		f, err := w.CreateHeader(&zip.FileHeader{Name: "archive/" + name, Method: zip.Store})
		if err == nil {
			_, err = f.Write(data)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	put("data.pkl", []byte(pkl))
	for name, data := range records {
		put(name, data)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestLimits reaches each limit of the package that the hostile files
// (TestReadHostile) do not: each refusal names the limit or what was
// found, and one step inside each limit is accepted.
func TestLimits(t *testing.T) {
	storage := map[string][]byte{"data/0": make([]byte, 4)}
	ones := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = 1
		}
		return s
	}
	long4 := func(n int) string {
		var b bytes.Buffer
		b.WriteString("\x80\x02\x8b")
		binary.Write(&b, binary.LittleEndian, uint32(n))
		b.Write(bytes.Repeat([]byte{1}, n))
		b.WriteByte('.')
		return b.String()
	}
	legacyHead := "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.\x80\x02M\xe9\x03.\x80\x02}."
	var longLegacy bytes.Buffer
	longLegacy.WriteString(legacyHead + "\x80\x02X")
	binary.Write(&longLegacy, binary.LittleEndian, uint32(MaxPickleBytes))
	longLegacy.Write(make([]byte, MaxPickleBytes))
	for _, c := range []struct {
		name string
		data []byte
		want error  // nil: accepted
		says string // in the error
	}{
		{"rank 16", zipCheckpoint(t, tensorPickle(ones(maxDims), 0), storage), nil, ""},
		{"rank 17", zipCheckpoint(t, tensorPickle(ones(maxDims+1), 0), storage), ErrContent, "has 17 dimensions (at most 16)"},
		{"state_dict nested 4 deep", zipCheckpoint(t, tensorPickle([]int{1}, maxNesting), storage), nil, ""},
		{"state_dict nested 5 deep", zipCheckpoint(t, tensorPickle([]int{1}, maxNesting+1), storage), ErrContent, `holds no tensors (keys ["state_dict"])`},
		{"LONG4 of 257 bytes", zipWithPickle(long4(MaxIntBytes + 1)), ErrTooLarge, "an integer of 257 bytes (MaxIntBytes 256)"},
		{"LONG4 of 256 bytes", zipWithPickle(long4(MaxIntBytes)), ErrContent, "the file holds an int of 256 bytes"},
		{"INT of 257 digits", zipWithPickle("\x80\x02I" + strings.Repeat("1", MaxIntBytes+1) + "\n."), ErrCorrupt, "a text argument longer than 256 bytes"},
		{"data.pkl of MaxPickleBytes", zipCheckpoint(t, padPickle(tensorPickle([]int{1}, 0), MaxPickleBytes), storage), nil, ""},
		{"data.pkl of MaxPickleBytes+1", zipCheckpoint(t, padPickle(tensorPickle([]int{1}, 0), MaxPickleBytes+1), storage), ErrTooLarge, "of 16777217 bytes, limit 16777216 (MaxPickleBytes)"},
		{"legacy pickles ending at MaxPickleBytes", padLegacy(t, MaxPickleBytes), nil, ""},
		{"legacy pickles ending at MaxPickleBytes+1", padLegacy(t, MaxPickleBytes+1), ErrTooLarge, "must end within its first 16777216 bytes (MaxPickleBytes)"},
		{"legacy pickles past MaxPickleBytes", longLegacy.Bytes(), ErrTooLarge, "must end within its first 16777216 bytes (MaxPickleBytes)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read(c.data)
			switch {
			case c.want == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != nil && (!errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says)):
				t.Fatalf("error %v, want %v saying %q", err, c.want, c.says)
			}
		})
	}
}

// padPickle is pkl, a protocol-2 pickle, made n bytes long by a string
// pushed and popped just after its PROTO.
func padPickle(pkl string, n int) string {
	pad := n - len(pkl) - 6 // BINUNICODE, its length, POP
	var b strings.Builder
	b.WriteString(pkl[:2])
	b.WriteByte('X')
	binary.Write(&b, binary.LittleEndian, uint32(pad))
	b.WriteString(strings.Repeat(" ", pad))
	b.WriteByte('0')
	b.WriteString(pkl[2:])
	return b.String()
}

// fakeStorages resolves any persistent id of a legacy (fields 6) or zip
// (5) checkpoint to an empty storage of the size it declares.
func fakeStorages(fields int) func(u *unpickler, pid any) (any, error) {
	return func(u *unpickler, pid any) (any, error) {
		key, dt, n, err := storageID(pid, fields)
		if err != nil {
			return nil, err
		}
		return &storage{key: key, dtype: dt, numel: n, data: io.NewSectionReader(bytes.NewReader(nil), 0, 0)}, nil
	}
}

// padLegacy is testdata/legacy.pt with its object's pickle padded
// (padPickle) so that its five pickles end at offset end.
func padLegacy(t *testing.T, end int) []byte {
	data := readFixture(t, "legacy.pt")
	var starts [6]int
	for i := range 5 {
		persistent := fakeStorages(6)
		if i != 3 {
			persistent = nil
		}
		_, n, err := loadPickle(data[starts[i]:], &loadContext{fileSize: int64(len(data))}, persistent)
		if err != nil {
			t.Fatalf("pickle %d of legacy.pt: %v", i, err)
		}
		starts[i+1] = starts[i] + n
	}
	obj := string(data[starts[3]:starts[4]])
	if obj[:2] != "\x80\x02" {
		t.Fatalf("legacy.pt's object pickle starts %q", obj[:2])
	}
	padded := padPickle(obj, len(obj)+end-starts[5])
	return append(append(append([]byte(nil), data[:starts[3]]...), padded...), data[starts[4]:]...)
}

// TestPickleLimits: the MARKs open at once and the memory charged, each
// accepted at its limit and refused one past it.
func TestPickleLimits(t *testing.T) {
	marks := func(n int) []byte {
		return []byte("\x80\x02" + strings.Repeat("(", n) + strings.Repeat("t", n) + ".")
	}
	if _, _, err := loadPickle(marks(MaxPickleMarks), &loadContext{}, nil); err != nil {
		t.Errorf("%d MARKs open at once: %v", MaxPickleMarks, err)
	}
	if _, _, err := loadPickle(marks(MaxPickleMarks+1), &loadContext{}, nil); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "more than 1024 MARKs open at once (MaxPickleMarks)") {
		t.Errorf("%d MARKs open at once: %v", MaxPickleMarks+1, err)
	}

	// 400,000 empty dicts charge more than the budget of their 400,005
	// bytes; bytes after the STOP raise the budget (as the legacy format's
	// later pickles do) by PickleMemoryPerByte each, until it holds them.
	pkl := []byte("\x80\x02(" + strings.Repeat("}", 400_000) + "1N.")
	u := newUnpickler(pkl, &loadContext{})
	u.budget = math.MaxInt64
	if _, _, err := u.load(); err != nil {
		t.Fatal(err)
	}
	over := u.spent - PickleMemoryBase - PickleMemoryPerByte*int64(len(pkl))
	if over <= 0 {
		t.Fatalf("charged %d bytes, within the budget", u.spent)
	}
	pad := int((over + PickleMemoryPerByte - 1) / PickleMemoryPerByte)
	for _, c := range []struct {
		pad  int
		says string
	}{
		{pad, ""},
		{pad - 1, fmt.Sprintf("decoding the pickle of %d bytes needs more than %d bytes of memory", len(pkl)+pad-1, PickleMemoryBase+PickleMemoryPerByte*(len(pkl)+pad-1))},
	} {
		data := append(append([]byte(nil), pkl...), make([]byte, c.pad)...)
		_, _, err := loadPickle(data, &loadContext{}, nil)
		switch {
		case c.says == "" && err != nil:
			t.Errorf("charging %d bytes of a budget of %d: %v", u.spent, PickleMemoryBase+PickleMemoryPerByte*len(data), err)
		case c.says != "" && (!errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), c.says)):
			t.Errorf("charging %d bytes of a budget of %d: %v, want ErrTooLarge saying %q", u.spent, PickleMemoryBase+PickleMemoryPerByte*len(data), err, c.says)
		}
	}
}

// sharedPickle is a protocol-2 pickle of a dict of the given names, each
// a float32 tensor of numel elements over the one storage "0".
func sharedPickle(names []string, numel int) string {
	var b pickleWriter
	b.WriteString("\x80\x02}")
	for _, name := range names {
		b.str(name)
		b.rebuild(numel)
		b.tuple(numel)
		b.tuple(1)
		b.WriteString("\x89}tRs")
	}
	b.WriteByte('.')
	return b.String()
}

// TestClaimLimit: five names sharing one storage claim it five times,
// and tensorEntryBytes each; the file is accepted when they claim
// MaxTensorBytesPerFileByte times its size and refused when one more
// element makes them claim more. The encodings are of fixed width, so
// the file is R bytes besides the storage's 4n, and five names claim
// 20n + 5e: at n = R - 5e/4, exactly 4(R + 4n).
func TestClaimLimit(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e"}
	file := func(numel int) []byte {
		return zipCheckpoint(t, sharedPickle(names, numel), map[string][]byte{"data/0": make([]byte, 4*numel)})
	}
	r := len(file(1)) - 4
	n := r - 5*tensorEntryBytes/4
	at := file(n)
	if claim := 5*4*n + 5*tensorEntryBytes; claim != MaxTensorBytesPerFileByte*len(at) {
		t.Fatalf("the tensors claim %d bytes of a file of %d", claim, len(at))
	}
	if f, err := Read(at); err != nil || len(f.Names()) != 5 {
		t.Fatalf("claiming %d times the file: %v", MaxTensorBytesPerFileByte, err)
	}
	_, err := Read(file(n + 1))
	if size := r + 4*(n+1); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), fmt.Sprintf("the tensors claim more than %d bytes, 4 times the file's %d bytes (MaxTensorBytesPerFileByte)", 4*size, size)) {
		t.Fatalf("claiming 20 bytes past the limit: %v", err)
	}
}

// TestEmptyTensorNames: names of one empty tensor (memoized once, each
// name then a few bytes of pickle) claim no data, but each an entry of
// the File; 200,000 of them in a pickle of 3 MB would make entries of
// some 90 MB, and are refused by their entries' claims.
func TestEmptyTensorNames(t *testing.T) {
	var b pickleWriter
	b.WriteString("\x80\x02}")
	b.str("n0")
	b.rebuild(0)
	b.tuple(0)
	b.tuple(1)
	b.WriteString("\x89}tRq\x01s") // the tensor memoized as 1
	for i := 1; i < 200_000; i++ {
		b.str(fmt.Sprint("n", i))
		b.WriteString("h\x01s")
	}
	b.WriteByte('.')
	data := zipCheckpoint(t, b.String(), map[string][]byte{"data/0": nil})
	_, err := Read(data)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "bytes for its entry") {
		t.Fatalf("200,000 names of one empty tensor in %d bytes: %v, want ErrTooLarge", len(data), err)
	}
}
