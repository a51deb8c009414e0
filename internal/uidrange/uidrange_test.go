package uidrange

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Range
		err  string // a part of the error; "" for none
	}{
		{"200000:1048576", Range{200000, 1048576}, ""},
		{"1000:2", Range{1000, 2}, ""},
		{"4294967293:2", Range{4294967293, 2}, ""},
		{"4294967294:2", Range{}, "ends past uid 4294967295"},
		{"200000", Range{}, "is not START:COUNT"},
		{"", Range{}, "is not START:COUNT"},
		{"a:10", Range{}, `start "a" is not a whole number`},
		{"200000:x", Range{}, `count "x" is not a whole number`},
		{"-1:10", Range{}, "start"},
		{"200000:-5", Range{}, "count"},
		{"4294967296:10", Range{}, "below 2^32"},
		{"200000:1", Range{}, "count must be at least 2"},
		{"200000:0", Range{}, "count must be at least 2"},
		{"0:65536", Range{}, "start must be at least 1000"},
		{"999:10", Range{}, "start must be at least 1000"},
		{" 200000:10", Range{}, "start"},
		{"200000:10:5", Range{}, "count"},
	} {
		got, err := Parse(tc.in)
		if tc.err == "" {
			if err != nil || got != tc.want {
				t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Parse(%q) error = %v; want one containing %q", tc.in, err, tc.err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"200000:1048576", "1000:2", "0:0", ":", "4294967294:1", "1:4294967295", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			return
		}
		if r.Validate() != nil || r.Start < MinStart || r.Count < 2 || r.End() > maxEnd {
			t.Fatalf("Parse(%q) = %v, accepted an invalid range", s, r)
		}
		if back, err := Parse(r.String()); err != nil || back != r {
			t.Fatalf("Parse(%q).String() = %q does not parse back: %v, %v", s, r.String(), back, err)
		}
		// Every id Parse's range admits maps inside it; the first outside does not.
		if uid, err := r.UID(uint64(r.Count) - 1); err != nil || uint64(uid) >= r.End() {
			t.Fatalf("%v: last id gives %d, %v", r, uid, err)
		}
		if _, err := r.UID(uint64(r.Count)); err == nil {
			t.Fatalf("%v: id %d past the count was given a uid", r, r.Count)
		}
	})
}

func TestOverlaps(t *testing.T) {
	r := Range{1000, 10} // 1000-1009
	for _, tc := range []struct {
		o    Range
		want bool
	}{
		{Range{1000, 10}, true},
		{Range{990, 10}, false}, // 990-999
		{Range{990, 11}, true},
		{Range{1009, 1}, true},
		{Range{1010, 5}, false},
		{Range{500, 2000}, true},
		{Range{1005, 0}, false},
		{Range{4294967200, 95}, false},
	} {
		if got := r.Overlaps(tc.o); got != tc.want {
			t.Errorf("%v.Overlaps(%v) = %v, want %v", r, tc.o, got, tc.want)
		}
		if got := tc.o.Overlaps(r); got != tc.want {
			t.Errorf("%v.Overlaps(%v) = %v, want %v (not symmetric)", tc.o, r, got, tc.want)
		}
	}
}

func TestUID(t *testing.T) {
	r := Range{200000, 100}
	for _, tc := range []struct {
		id   uint64
		want uint32
		ok   bool
	}{
		{1, 200001, true},
		{99, 200099, true},
		{100, 0, false},
		{0, 0, false},
		{1 << 40, 0, false}, // never wraps
	} {
		got, err := r.UID(tc.id)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("UID(%d) = %d, %v; want %d, ok %v", tc.id, got, err, tc.want, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "200000:100") {
			t.Errorf("UID(%d) error %q does not name the range", tc.id, err)
		}
	}
}

func TestParseIDFiles(t *testing.T) {
	passwd := `root:x:0:0:root:/root:/bin/bash
# a comment
+nisuser::::::
alice:x:200005:200005::/home/alice:/bin/sh
broken:x:notanumber:1::/:/bin/sh

`
	got, err := parseIDFile("user", "uid")(strings.NewReader(passwd), "/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	want := []Taken{
		{Range{0, 1}, "user root (uid 0) in /etc/passwd"},
		{Range{200005, 1}, "user alice (uid 200005) in /etc/passwd"},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("passwd = %v, want %v", got, want)
	}
	sub := "alice:100000:65536\nbob:165536:65536\n#c:1:1\nbad:1\nzero:5:0\n"
	subs, err := parseSubIDs("subordinate uids")(strings.NewReader(sub), "/etc/subuid")
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 2 || subs[1].Range != (Range{165536, 65536}) || subs[1].What != "subordinate uids 165536-231071 of bob in /etc/subuid" {
		t.Errorf("subuid = %v", subs)
	}
}

func TestParseHostFile(t *testing.T) {
	es, err := parseHostFile(strings.NewReader(hostFileHeader+"200000:1048576 /root/.kin\n1248576:1048576 /home/a b/.kin\n"), "f")
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[1].Home != "/home/a b/.kin" || es[1].Range != (Range{1248576, 1048576}) {
		t.Errorf("entries = %v", es)
	}
	back, err := parseHostFile(strings.NewReader(string(formatHostFile(es))), "f")
	if err != nil || len(back) != 2 || back[0] != es[0] || back[1] != es[1] {
		t.Errorf("round trip = %v, %v", back, err)
	}
	for _, bad := range []string{"200000:10\n", "200000:10 relative/home\n", "x:10 /h\n"} {
		if _, err := parseHostFile(strings.NewReader(bad), "f"); err == nil || !strings.Contains(err.Error(), "f:1:") {
			t.Errorf("parseHostFile(%q) error = %v; want one naming f:1", bad, err)
		}
	}
}

func TestFree(t *testing.T) {
	n := uint64(DefaultCount)
	for _, tc := range []struct {
		name   string
		others []Entry
		taken  []Taken
		want   uint32
	}{
		{"empty host", nil, nil, DefaultStart},
		{"one daemon", []Entry{{Range{DefaultStart, DefaultCount}, "/a"}}, nil, uint32(DefaultStart + n)},
		{"a gap too small", []Entry{{Range{DefaultStart + 10, 5}, "/a"}}, nil, DefaultStart + 15},
		{"a user inside", nil, []Taken{{Range{DefaultStart + 7, 1}, "user x"}}, DefaultStart + 8},
		{"ranges out of order", []Entry{{Range{DefaultStart + uint32(n), 100}, "/b"}, {Range{DefaultStart, DefaultCount}, "/a"}}, nil, uint32(DefaultStart + n + 100)},
		{"below the start is ignored", nil, []Taken{{Range{1000, 60000}, "subordinate"}}, DefaultStart},
	} {
		got, err := free(tc.others, tc.taken)
		if err != nil || got != (Range{tc.want, DefaultCount}) {
			t.Errorf("%s: free = %v, %v; want start %d", tc.name, got, err, tc.want)
		}
	}
	if _, err := free(nil, []Taken{{Range{DefaultStart, 1<<31 - DefaultStart}, "everything"}}); err == nil || !strings.Contains(err.Error(), "--uid-range") {
		t.Errorf("a full host: err = %v; want one pointing at --uid-range", err)
	}
}
