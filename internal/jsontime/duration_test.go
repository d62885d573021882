package jsontime

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestDurationRoundTripAndErrors(t *testing.T) {
	var d Duration
	if err := json.Unmarshal([]byte(`"1m30s"`), &d); err != nil || d.Duration != 90*time.Second {
		t.Fatalf("%v %v", d, err)
	}
	b, err := json.Marshal(d)
	if err != nil || string(b) != `"1m30s"` {
		t.Errorf("marshal %s %v", b, err)
	}
	for in, want := range map[string]string{`5`: `want a duration such as "5s", got 5`, `"soon"`: `got "soon"`} {
		if err := json.Unmarshal([]byte(in), &d); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", in, err)
		}
	}
}
