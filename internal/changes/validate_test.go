package changes

import "testing"

func TestValidateBranch(t *testing.T) {
	for _, tc := range []struct {
		branch string
		ok     bool
	}{
		{"agent/fix-1", true}, {"feature/a.b", true}, {"main", true},
		{"", false}, {"@", false}, {"-x", false}, {"/a", false}, {"a/", false}, {"a//b", false},
		{"a..b", false}, {"a.", false}, {"a@{1}", false}, {"a b", false}, {"a~1", false},
		{"a^", false}, {"a:b", false}, {"a?", false}, {"a*", false}, {"a[b", false}, {"a\\b", false},
		{".hidden", false}, {"a/.b", false}, {"x.lock", false}, {"x.lock/y", false}, {"a\x01", false},
	} {
		if err := ValidateBranch(tc.branch); (err == nil) != tc.ok {
			t.Errorf("ValidateBranch(%q) = %v, want ok=%v", tc.branch, err, tc.ok)
		}
	}
}

func TestValidateGlob(t *testing.T) {
	for _, tc := range []struct {
		glob string
		ok   bool
	}{
		{"out/*.txt", true}, {"**/*.log", true}, {"a..b/x", true},
		{"", false}, {"/etc/passwd", false}, {"../x", false}, {"a/../../x", false}, {"..", false},
	} {
		if err := ValidateGlob(tc.glob); (err == nil) != tc.ok {
			t.Errorf("ValidateGlob(%q) = %v, want ok=%v", tc.glob, err, tc.ok)
		}
	}
}

func TestParseNumstat(t *testing.T) {
	files, err := parseNumstat("3\t1\ta.txt\x00-\t-\tb.bin\x000\t2\tgone\x00", "M\x00a.txt\x00A\x00b.bin\x00D\x00gone\x00")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 || files[0].Insertions != 3 || files[0].Deletions != 1 || files[0].Status != "M" ||
		!files[1].Binary || files[1].Status != "A" || files[2].Deletions != 2 || files[2].Status != "D" {
		t.Fatalf("parsed %+v", files)
	}
	if _, err := parseNumstat("garbage\x00", ""); err == nil {
		t.Fatal("a malformed record parsed")
	}
}
