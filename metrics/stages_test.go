// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/neureality-sdk/nr1-agent/internal/latest"
)

func TestStagesReportTheirHealth(t *testing.T) {
	ok, failing, never := latest.New(0), latest.New(0), latest.New(0)
	ok.Publish(time.Unix(1700000000, 0), 1)
	failing.Publish(time.Unix(1700000100, 0), 1)
	failing.Fail(errors.New("pod-resources List: deadline exceeded"))
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewStageCollector(map[string]Stage{"sampler": ok, "allocation": failing, "partition": never}))
	want := `
# HELP nr1_stage_last_success_timestamp_seconds When the stage last succeeded (Unix time); absent before its first success.
# TYPE nr1_stage_last_success_timestamp_seconds gauge
nr1_stage_last_success_timestamp_seconds{stage="allocation"} 1.7000001e+09
nr1_stage_last_success_timestamp_seconds{stage="sampler"} 1.7e+09
# HELP nr1_stage_up 1 when the stage's last attempt succeeded, 0 when it failed or has not succeeded yet.
# TYPE nr1_stage_up gauge
nr1_stage_up{stage="allocation"} 0
nr1_stage_up{stage="partition"} 0
nr1_stage_up{stage="sampler"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
