// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
)

// scraper reads the agent's /metrics every second.
type scraper struct {
	mu       sync.Mutex
	ok, away int      // away: no Ready agent to ask (being replaced)
	failures []string // scrapes that did not answer 200 with a sound exposition
	// actions per agent instance and kind (dry_run="false"): first and highest value seen.
	instances []string
	first     map[string]map[string]float64
	highest   map[string]map[string]float64
}

func newScraper() *scraper {
	return &scraper{first: map[string]map[string]float64{}, highest: map[string]map[string]float64{}}
}

func (s *scraper) run(ctx context.Context, c kubernetes.Interface) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		s.scrape(c)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *scraper) scrape(c kubernetes.Interface) {
	agent, err := readyAgent(c)
	if err != nil {
		s.mu.Lock()
		s.away++
		s.mu.Unlock()
		return
	}
	answered, body, err := getMetrics(agent.Status.PodIP)
	var actions map[string]float64
	if err == nil {
		actions, err = checkExposition(body)
	}
	if err != nil && !answered {
		// Unreachable because it went away meanwhile is no answer.
		if now, rerr := readyAgent(c); rerr != nil || now.UID != agent.UID {
			s.mu.Lock()
			s.away++
			s.mu.Unlock()
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.failures = append(s.failures, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05"), agent.Name, err))
		return
	}
	s.ok++
	inst := agentInstance(agent)
	if _, ok := s.first[inst]; !ok {
		s.instances = append(s.instances, inst)
		s.first[inst], s.highest[inst] = actions, map[string]float64{}
	}
	for k, v := range actions {
		s.highest[inst][k] = max(s.highest[inst][k], v)
	}
}

// getMetrics reads /metrics; answered says whether the agent answered at all.
func getMetrics(ip string) (answered bool, body string, err error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + ip + ":9470/metrics")
	if err != nil {
		return false, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return true, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return true, "", fmt.Errorf("HTTP %d: %.400s", resp.StatusCode, strings.Join(strings.Fields(string(b)), " "))
	}
	return true, string(b), nil
}

// checkExposition refuses duplicate families or series and an exposition without the
// enforcement counters; it returns nr1_enforcement_actions_total{dry_run="false"} by
// action.
func checkExposition(body string) (map[string]float64, error) {
	families, series := map[string]bool{}, map[string]bool{}
	actions := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			if families[f[2]] {
				return nil, fmt.Errorf("family %s twice", f[2])
			}
			families[f[2]] = true
		}
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("line %q", line)
		}
		key := line[:i]
		if series[key] {
			return nil, fmt.Errorf("series %s twice", key)
		}
		series[key] = true
		if strings.HasPrefix(key, "nr1_enforcement_actions_total{") && strings.Contains(key, `dry_run="false"`) {
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err != nil {
				return nil, fmt.Errorf("line %q: %w", line, err)
			}
			for _, k := range actionKinds {
				if strings.Contains(key, `action="`+k+`"`) {
					actions[k] = v
				}
			}
		}
	}
	for _, k := range actionKinds {
		if _, ok := actions[k]; !ok {
			return nil, fmt.Errorf(`no nr1_enforcement_actions_total{action=%q,dry_run="false"}`, k)
		}
	}
	return actions, nil
}
