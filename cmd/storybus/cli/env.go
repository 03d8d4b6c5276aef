package cli

import (
	"fmt"
	"os"
	"strings"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// EnvPrefix starts the name of every environment variable that sets a
// flag: STORYBUS_ and the flag's name, upper-case, dashes as underscores
// (--sync-interval is STORYBUS_SYNC_INTERVAL).
const EnvPrefix = "STORYBUS_"

// envAnnotation marks a flag read from the environment too; its value is
// the variable's name.
const envAnnotation = "storybus.io/env"

// fromEnvAnnotation marks a flag whose value flagsFromEnv took from its
// variable, so that an error about the value can name the variable.
const fromEnvAnnotation = "storybus.io/from-env"

// EnvName returns the environment variable of the flag name.
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// readEnv lets the flags names of cmd, or with none every flag it has so
// far (hidden and deprecated ones aside), be set from the environment as
// well, and says so in their help.
func readEnv(cmd *cobra.Command, names ...string) {
	fs := cmd.Flags()
	mark := func(f *pflag.Flag) {
		if _, done := f.Annotations[envAnnotation]; done {
			return
		}
		env := EnvName(f.Name)
		_ = fs.SetAnnotation(f.Name, envAnnotation, []string{env})
		f.Usage += " (env " + env + ")"
	}
	if len(names) == 0 {
		fs.VisitAll(func(f *pflag.Flag) {
			if !f.Hidden && f.Deprecated == "" {
				mark(f)
			}
		})
		return
	}
	for _, n := range names {
		mark(fs.Lookup(n))
	}
}

// flagsFromEnv sets each flag of cmd that readEnv marked and the command
// line did not give from its environment variable, when that is set and
// not empty: a flag on the command line wins. A repeatable flag takes a
// comma-separated list. A value the flag does not take is a usage error.
func flagsFromEnv(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		env, marked := f.Annotations[envAnnotation]
		if !marked || f.Changed || err != nil {
			return
		}
		v, ok := os.LookupEnv(env[0])
		if !ok || v == "" {
			return
		}
		var serr error
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			serr = sv.Replace(strings.Split(v, ","))
		} else {
			serr = f.Value.Set(v)
		}
		if serr != nil {
			err = usageError{fmt.Errorf("%s=%q: %w", env[0], v, serr)}
			return
		}
		// f.Changed stays false: it says what the command line gave.
		_ = cmd.Flags().SetAnnotation(f.Name, fromEnvAnnotation, env)
	})
	return err
}

// nameTheVariable prefixes a usage error of cmd that begins with a flag
// ("--sync must be always or interval") with the variable the flag's value
// came from, when it came from the environment: the flag is not on the
// command line the user is looking at. The value is not repeated, since it
// may be a secret.
func nameTheVariable(cmd *cobra.Command, msg string) string {
	name, ok := strings.CutPrefix(msg, "--")
	if !ok || cmd == nil {
		return msg
	}
	if i := strings.IndexFunc(name, func(r rune) bool { return r != '-' && !unicode.IsLetter(r) && !unicode.IsDigit(r) }); i >= 0 {
		name = name[:i]
	}
	f := cmd.Flags().Lookup(name)
	if f == nil {
		return msg
	}
	env, fromEnv := f.Annotations[fromEnvAnnotation]
	if !fromEnv {
		return msg
	}
	return env[0] + ": " + msg
}
