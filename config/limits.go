package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/srptarget/srptarget/srp"
)

// One row per key of limits: its default, its range, how the summary prints it and what it
// becomes in the engine's srp.Limits. ApplyDefaults, Validate, Summary, SRPLimits and the
// reload's check that limits do not change all walk this table, so that a knob is one row
// here plus one field in Limits and one in srp.Limits. The rows are in the file's order; a
// default that depends on another limit (buffer_pool_size on max_transfer_size, the
// per-source shares on the totals) comes after it.
var limitSpecs = []limitSpec{
	sizeLimit("max_it_iu_len", func(l *Limits) *Size { return &l.MaxIUSize }, srp.DefaultMaxITIULen, MinIUSize, 1<<20,
		"Linux with immediate data needs 8260", func(e *srp.Limits, v Size) { e.MaxITIULen = uint32(v) }),
	intLimit("credits", func(l *Limits) *int { return &l.Credits }, srp.DefaultCredits, 2, 4096,
		func(e *srp.Limits, v int) { e.Credits = v }),
	intLimit("max_channels", func(l *Limits) *int { return &l.MaxChannels }, srp.DefaultMaxChannels, 1, 256,
		func(e *srp.Limits, v int) { e.MaxChannels = v }),
	maxTransferSizeRow(),
	intLimit("send_queue_depth", func(l *Limits) *int { return &l.SendQueueDepth }, srp.DefaultSendQueueDepth, 16, 65536,
		func(e *srp.Limits, v int) { e.SendQueueDepth = v }),
	bufferPoolSizeRow(),
	immediateDataRow(),
	completionRow(),
	durationLimit("poll_window", func(l *Limits) *Duration { return &l.PollWindow }, srp.DefaultPollWindow, time.Microsecond, time.Second,
		"such as 50us", func(e *srp.Limits, v time.Duration) { e.PollWindow = v }),
	durationLimit("rdma_timeout", func(l *Limits) *Duration { return &l.RDMATimeout }, srp.DefaultRDMATimeout, 100*time.Millisecond, time.Hour,
		"such as 30s", func(e *srp.Limits, v time.Duration) { e.RDMATimeout = v }),
	maxInitiatorBufferRow(),
	intLimit("max_sessions", func(l *Limits) *int { return &l.MaxSessions }, srp.DefaultMaxSessions, 1, 65536,
		func(e *srp.Limits, v int) { e.MaxSessions = v }),
	intLimit("max_channels_total", func(l *Limits) *int { return &l.MaxChannelsTotal }, srp.DefaultMaxChannelsTotal, 1, 65536,
		func(e *srp.Limits, v int) { e.MaxChannelsTotal = v }).
		also(func(l *Limits) (string, string) {
			if l.MaxChannelsTotal < l.MaxChannels {
				return fmt.Sprintf("%d is less than max_channels (%d): no initiator could open max_channels channels", l.MaxChannelsTotal, l.MaxChannels), ""
			}
			return "", ""
		}),
	shareLimit("max_sessions_per_source", func(l *Limits) *int { return &l.MaxSessionsPerSource }, "max_sessions",
		func(l *Limits) int { return l.MaxSessions }, func(e *srp.Limits, v int) { e.MaxSessionsPerSource = v }),
	shareLimit("max_channels_per_source", func(l *Limits) *int { return &l.MaxChannelsPerSource }, "max_channels_total",
		func(l *Limits) int { return l.MaxChannelsTotal }, func(e *srp.Limits, v int) { e.MaxChannelsPerSource = v }).
		also(func(l *Limits) (string, string) {
			if l.MaxChannelsPerSource < l.MaxChannels {
				return "", fmt.Sprintf("%d is less than max_channels (%d): an initiator host cannot open max_channels channels", l.MaxChannelsPerSource, l.MaxChannels)
			}
			return "", ""
		}),
	idleTimeoutRow(),
	intLimit("max_logins_in_progress", func(l *Limits) *int { return &l.MaxLoginsInProgress }, srp.DefaultMaxLoginsInProgress, 1, 1024,
		func(e *srp.Limits, v int) { e.MaxLoginsInProgress = v }),
	intLimit("poll_groups", func(l *Limits) *int { return &l.PollGroups }, srp.DefaultPollGroups(), 1, 1024,
		func(e *srp.Limits, v int) { e.PollGroups = v }).machineDefault(),
	intLimit("srq_depth", func(l *Limits) *int { return &l.SRQDepth }, srp.DefaultSRQDepth, -1, 65536,
		func(e *srp.Limits, v int) { e.SRQDepth = v }),
	schedulingRow(),
	backstoreIORow(),
}

// limitSpec is one key of limits.
type limitSpec struct {
	key string
	// fill sets the default where the field is zero (ApplyDefaults).
	fill func(*Limits)
	// check returns what Validate reports at the key: an error, or a warning.
	check func(*Limits) (err, warn string)
	// set puts the value in the engine's limits (nil: not an engine limit).
	set func(*Limits, *srp.Limits)
	// show prints the value, for the summary and for a reload that would change it.
	show func(*Limits) string
	// unsummarized keeps the key out of Summary: its default depends on the machine (the
	// CPUs), so that a summary means the same wherever it is made.
	unsummarized bool
}

// also adds a check to s, run when s's own check found nothing.
func (s limitSpec) also(check func(*Limits) (string, string)) limitSpec {
	own := s.check
	s.check = func(l *Limits) (string, string) {
		if err, warn := own(l); err != "" || warn != "" {
			return err, warn
		}
		return check(l)
	}
	return s
}

func fillZero[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

func intLimit(key string, field func(*Limits) *int, def, lo, hi int, set func(*srp.Limits, int)) limitSpec {
	return limitSpec{
		key:  key,
		fill: func(l *Limits) { fillZero(field(l), def) },
		check: func(l *Limits) (string, string) {
			if v := *field(l); v < lo || v > hi {
				return fmt.Sprintf("%d is outside %d..%d", v, lo, hi), ""
			}
			return "", ""
		},
		set:  func(l *Limits, e *srp.Limits) { set(e, *field(l)) },
		show: func(l *Limits) string { return fmt.Sprint(*field(l)) },
	}
}

// wordLimit is the row of a limit spelled as one of a few words (named kind; choices lists them
// for the message), which parse reads for the engine and set stores.
func wordLimit[T any](key string, field func(*Limits) *string, def, kind, choices string,
	parse func(string) (T, error), set func(*srp.Limits, T)) limitSpec {
	return limitSpec{
		key:  key,
		fill: func(l *Limits) { fillZero(field(l), def) },
		check: func(l *Limits) (string, string) {
			if _, err := parse(*field(l)); err != nil {
				return fmt.Sprintf("%q is not a %s: use %s", *field(l), kind, choices), ""
			}
			return "", ""
		},
		set: func(l *Limits, e *srp.Limits) {
			v, _ := parse(*field(l))
			set(e, v)
		},
		show: func(l *Limits) string { return *field(l) },
	}
}

func sizeLimit(key string, field func(*Limits) *Size, def, lo, hi Size, note string, set func(*srp.Limits, Size)) limitSpec {
	return limitSpec{
		key:  key,
		fill: func(l *Limits) { fillZero(field(l), def) },
		check: func(l *Limits) (string, string) {
			if v := *field(l); v < lo || v > hi {
				return fmt.Sprintf("%d is outside %d..%v (%s)", int64(v), int64(lo), hi, note), ""
			}
			return "", ""
		},
		set:  func(l *Limits, e *srp.Limits) { set(e, *field(l)) },
		show: func(l *Limits) string { return fmt.Sprint(int64(*field(l))) },
	}
}

func durationLimit(key string, field func(*Limits) *Duration, def, lo, hi time.Duration, example string, set func(*srp.Limits, time.Duration)) limitSpec {
	return limitSpec{
		key:  key,
		fill: func(l *Limits) { fillZero(field(l), Duration(def)) },
		check: func(l *Limits) (string, string) {
			if d := time.Duration(*field(l)); d < lo || d > hi {
				return fmt.Sprintf("%q must be a duration between %v and %v, %s", *field(l), Duration(lo), Duration(hi), example), ""
			}
			return "", ""
		},
		set:  func(l *Limits, e *srp.Limits) { set(e, time.Duration(*field(l))) },
		show: func(l *Limits) string { return field(l).String() },
	}
}

// shareLimit is a per-source-address bound of a total (of): a quarter of it by default
// (srp.DefaultShare), at most all of it, with a warning when it is all of it.
func shareLimit(key string, field func(*Limits) *int, of string, total func(*Limits) int, set func(*srp.Limits, int)) limitSpec {
	return limitSpec{
		key:  key,
		fill: func(l *Limits) { fillZero(field(l), max(1, total(l)/srp.DefaultShare)) },
		check: func(l *Limits) (string, string) {
			v, t := *field(l), total(l)
			switch {
			case v < 1:
				return fmt.Sprintf("%d is less than 1", v), ""
			case t >= 1 && v > t:
				return fmt.Sprintf("%d is more than %s (%d)", v, of, t), ""
			case v == t && t > 1:
				return "", fmt.Sprintf("equals %s: one host can take all of them and lock the others out", of)
			}
			return "", ""
		},
		set:  func(l *Limits, e *srp.Limits) { set(e, *field(l)) },
		show: func(l *Limits) string { return fmt.Sprint(*field(l)) },
	}
}

// applyDefaults fills every limit the file leaves out.
func (lim *Limits) applyDefaults() {
	for _, s := range limitSpecs {
		s.fill(lim)
	}
}

// validateLimits reports every limit out of its range.
func (v *validator) validateLimits(lim *Limits) {
	for _, s := range limitSpecs {
		err, warn := s.check(lim)
		if err != "" {
			v.errorf(At("limits", s.key), "%s", err)
		}
		if warn != "" {
			v.warnf(At("limits", s.key), "%s", warn)
		}
	}
}

// SRPLimits maps the configuration's limits to the engine's.
func (c *Config) SRPLimits() srp.Limits {
	var e srp.Limits
	for _, s := range limitSpecs {
		if s.set != nil {
			s.set(&c.Limits, &e)
		}
	}
	return e
}

// LimitChanges lists the limits whose values differ between a and b: for the engine's, what
// the engine would get (25% and 16MiB of a 64MiB pool are the same), for the others what is
// written. The engine's limits are fixed when it is made: a reload that changes one is refused.
func LimitChanges(a, b *Limits) []LimitChange {
	var out []LimitChange
	for _, s := range limitSpecs {
		same := s.show(a) == s.show(b)
		if s.set != nil {
			var ea, eb srp.Limits
			s.set(a, &ea)
			s.set(b, &eb)
			same = ea == eb
		}
		if !same {
			out = append(out, LimitChange{Key: s.key, Old: s.show(a), New: s.show(b)})
		}
	}
	return out
}

// LimitChange is one limit a new configuration changes.
type LimitChange struct{ Key, Old, New string }

// limitsSummary writes the limits as Summary prints them: key value pairs, wrapped.
func limitsSummary(b *strings.Builder, lim *Limits) {
	var items []string
	for _, s := range limitSpecs {
		if !s.unsummarized {
			items = append(items, s.key+" "+s.show(lim))
		}
	}
	line := "limits:"
	for i, item := range items {
		if i < len(items)-1 {
			item += ","
		}
		if len(line)+1+len(item) > 100 {
			b.WriteString(line + "\n")
			line = "       "
		}
		line += " " + item
	}
	b.WriteString(line + "\n")
}

// machineDefault keeps s out of Summary: its default depends on the machine.
func (s limitSpec) machineDefault() limitSpec {
	s.unsummarized = true
	return s
}
