package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) eventsCommand() *cobra.Command {
	var (
		f      kin.EventFilter
		limit  int64
		follow bool
	)
	cmd := &cobra.Command{
		Use:   "events [flags]",
		Short: "List the event log, or follow it live",
		Long: `List stored events, oldest first, one per line: sequence number, time, type,
then the event's fields as key=value. With --json: JSON lines, one event
object per line.

With --follow the command keeps running and prints each new event as it is
committed, until interrupted (Ctrl-C exits with status 0).

On a host of a fleet of several (kin hosts), the log is the fleet's: each
text line ends with host=NAME, the host of the event's agent.

Event types of the registry and the governor: ` + strings.Join([]string{kin.EventAgentRegistered, kin.EventChildSpawned}, ", ") + `,
` + strings.Join([]string{kin.EventAgentStatus, kin.EventSpawnRejected, kin.EventCircuitOpen, kin.EventGovernorChanged}, ", ") + `.
Of the supervisor: ` + strings.Join([]string{kin.EventAgentStarted, kin.EventAgentExited, kin.EventChildCancel, kin.EventAgentStop}, ", ") + `,
` + strings.Join([]string{kin.EventAgentState, kin.EventAgentOffline, kin.EventAgentReplaced, kin.EventAgentFailed}, ", ") + `,
` + strings.Join([]string{kin.EventAgentAdopted, kin.EventAgentLost}, ", ") + `.`,
		Example: `  kin events
  kin events --agent 7 --type agent.status
  kin events --since 120 --follow --json | jq .type`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			f.Limit = int(min(limit, int64(^uint(0)>>1)))
			for _, t := range f.Types {
				if !slices.Contains(kin.EventTypes, t) {
					return usageErrorf("--type %q is not an event type; the known ones: %s", t, strings.Join(kin.EventTypes, ", "))
				}
			}
			svc, err := a.service()
			if err != nil {
				return err
			}
			write := a.eventWriter(fleetHosts(cmd.Context(), svc))
			if follow {
				ctx := cmd.Context()
				err := svc.FollowEvents(ctx, f, write)
				if errors.Is(err, context.Canceled) && ctx.Err() != nil {
					return nil // interrupted: the normal way to stop following
				}
				return err
			}
			evs, err := svc.Events(cmd.Context(), f)
			if err != nil {
				return err
			}
			for _, e := range evs {
				if err := write(e); err != nil {
					return err
				}
			}
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.Var(a.idFlag(&f.Agent, "agent", false), "agent", "only events concerning this agent `ID` (as subject or parent)")
	fl.BoolVar(&f.Subject, "subject", false, "with --agent: only the events about that agent itself, not those about its children")
	fl.Var(nonNegFlag{n: &f.Since}, "since", "only events after this sequence number (exclusive)")
	fl.StringArrayVar(&f.Types, "type", nil, "only events of this `type` (repeatable)")
	fl.Var(nonNegFlag{n: &limit}, "limit", "at most this many events (0: no limit)")
	fl.BoolVarP(&follow, "follow", "f", false, "keep printing new events until interrupted")
	return cmd
}

// fleetHosts names the host of each event's agent when the daemon is a
// host of a fleet of several (kin.Host: each agent's own, read once per
// agent); nil on one host, or for a caller who may not list the hosts, so
// one host's lines are unchanged.
func fleetHosts(ctx context.Context, svc kin.Service) func(kin.AgentID) string {
	hosts, err := svc.Hosts(ctx)
	if err != nil || len(hosts) < 2 {
		return nil
	}
	known := map[kin.AgentID]string{}
	return func(id kin.AgentID) string {
		h, ok := known[id]
		if !ok {
			if a, err := svc.Agent(ctx, id); err == nil {
				h = a.Host
			}
			known[id] = h // an agent's host never changes
		}
		return h
	}
}

// eventWriter returns the function that prints one event; with hostOf,
// the text line ends with the host of the event's agent (host=NAME).
func (a *app) eventWriter(hostOf func(kin.AgentID) string) func(kin.Event) error {
	w := a.env.Stdout
	if a.jsonOut {
		return func(e kin.Event) error {
			b, err := json.Marshal(e)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(w, "%s\n", b)
			return err
		}
	}
	return func(e kin.Event) error {
		line := formatEvent(e)
		if hostOf != nil && e.Agent != 0 {
			line += " host=" + kvString(orDash(hostOf(e.Agent)))
		}
		_, err := io.WriteString(w, line+"\n")
		return err
	}
}

// formatEvent is an event's text line: seq, time, type, then its data fields
// as key=value in the order the data has them.
func formatEvent(e kin.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s %-21s", e.Seq, formatTime(e.Time), e.Type)
	fields, err := orderedFields(e.Data)
	if err != nil {
		fmt.Fprintf(&b, " data=%s", kvString(string(e.Data)))
	}
	for _, kv := range fields {
		fmt.Fprintf(&b, " %s=%s", kv[0], kvValue(kv[1]))
	}
	return strings.TrimRight(b.String(), " ")
}

// orderedFields splits a JSON object into its keys and raw values, in order.
func orderedFields(data json.RawMessage) ([][2]string, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("event data is not a JSON object")
	}
	var out [][2]string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		out = append(out, [2]string{key, string(raw)})
	}
	return out, nil
}

// kvValue prints a JSON value for key=value: strings bare when that is
// unambiguous, otherwise quoted; numbers, booleans and null as they are;
// objects and arrays as compact JSON.
func kvValue(raw string) string {
	if strings.HasPrefix(raw, `"`) {
		var s string
		if json.Unmarshal([]byte(raw), &s) == nil {
			return kvString(s)
		}
	}
	var buf bytes.Buffer
	if json.Compact(&buf, []byte(raw)) == nil {
		return buf.String()
	}
	return raw
}

// kvString quotes s unless it is a non-empty run of printable characters
// without spaces, quotes or '='.
func kvString(s string) string {
	if s == "" {
		return `""`
	}
	for _, r := range s {
		if unicode.IsSpace(r) || r == '"' || r == '=' || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
