package peerbench

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	for name, tc := range map[string]struct {
		args    []string
		want    func(Config) bool // holds for the parsed config
		wantErr string            // part of the error; empty: no error
	}{
		"no flags give the default rates and duration": {
			want: func(c Config) bool {
				return slices.Equal(c.Rates, []int{250, 500, 1000}) && c.Duration == 10*time.Second
			},
		},
		"rates, duration and one core per webhook are read": {
			args: []string{"-rates", "2000, 100", "-duration", "3s", "-server-procs", "1"},
			want: func(c Config) bool {
				return slices.Equal(c.Rates, []int{2000, 100}) && c.Duration == 3*time.Second && c.MaxProcs == 1
			},
		},
		"a rate that is not a number is refused":       {args: []string{"-rates", "250,fast"}, wantErr: `"fast" is not an integer`},
		"a zero rate is refused":                       {args: []string{"-rates", "0"}, wantErr: "rate 0 is outside"},
		"a rate above the generator's pace is refused": {args: []string{"-rates", "20001"}, wantErr: "rate 20001 is outside"},
		"a rate given twice is refused":                {args: []string{"-rates", "500,500"}, wantErr: "rate 500 is given twice"},
		"more than ten rates are refused":              {args: []string{"-rates", "1,2,3,4,5,6,7,8,9,10,11"}, wantErr: "11 rates"},
		"an hour-long step is refused":                 {args: []string{"-duration", "1h"}, wantErr: "duration 1h0m0s is outside"},
		"a zero duration is refused":                   {args: []string{"-duration", "0s"}, wantErr: "duration 0s is outside"},
		"a negative GOMAXPROCS is refused":             {args: []string{"-server-procs", "-1"}, wantErr: "GOMAXPROCS -1"},
		"a zero in-flight cap is refused":              {args: []string{"-max-inflight", "0"}, wantErr: "max in flight 0"},
		"arguments after the flags are refused":        {args: []string{"now"}, wantErr: "unexpected arguments"},
		"an unknown flag is refused":                   {args: []string{"-mix", "x"}, wantErr: "flag provided but not defined"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := ParseFlags(tc.args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseFlags(%q) error %v, want one containing %q", tc.args, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseFlags(%q): %v", tc.args, err)
			}
			if !tc.want(cfg) {
				t.Errorf("ParseFlags(%q) = %+v", tc.args, cfg)
			}
		})
	}
}
