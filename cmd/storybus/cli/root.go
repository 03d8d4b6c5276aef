// Package cli wires the storybus subcommands: flags bound onto typed
// options, then the packages that do the work.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/storybus/storybus/internal/buildinfo"
)

// Exit codes a script can rely on.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// usageError marks an error in how the command was called.
type usageError struct{ error }

// Execute runs the storybus command line and returns its exit code.
func Execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := NewRoot(stdin, stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	// One line, as the documentation promises: errors.Join writes one line
	// per joined error.
	msg := strings.ReplaceAll(err.Error(), "\n", ": ")
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(stderr, "storybus:", nameTheVariable(cmd, msg))
		return ExitUsage
	}
	fmt.Fprintln(stderr, "storybus:", msg)
	var ce interface{ ExitCode() int }
	if errors.As(err, &ce) {
		return ce.ExitCode()
	}
	return ExitError
}

// NewRoot returns the root command with every subcommand.
func NewRoot(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "storybus",
		Short:         "storybus: a multi-tenant SOM 1.0 message bus for newsrooms on Kubernetes",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildinfo.Get().String(),
	}
	root.SetVersionTemplate(versionTemplate)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	// Flags not on the command line come from the environment, where the
	// command reads it (readEnv); the command line wins.
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return flagsFromEnv(cmd) }
	root.AddCommand(newServeCommand(), newDevCommand(), newBenchCommand())
	root.AddCommand(newOperatorCommand())
	root.AddCommand(newTokenCommand(), newPublishCommand(), newOutboxCommand(), newConsumeCommand())
	root.AddCommand(newVersionCommand())
	root.AddCommand(newOpenAPICommand())
	root.SetHelpCommand(newHelpCommand())
	argsAreUsage(root)
	return root
}

// argsAreUsage makes every command's wrong arguments a usage error (exit
// 2), as its flags' are; an unknown subcommand is one too.
func argsAreUsage(cmd *cobra.Command) {
	if cmd.HasSubCommands() && !cmd.Runnable() {
		// Cobra's own check of a subcommand's name answers with an error
		// of no type a caller can tell apart (and none at all below the
		// root): the group checks its arguments itself, and prints its
		// help when called alone.
		cmd.Args = unknownCommand
		cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	}
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		argsAreUsage(sub)
	}
}

// newHelpCommand is `storybus help [command]`: cobra's own prints the
// root's help and exits 0 for a topic it does not know; this one makes that
// a usage error, as an unknown command is.
func newHelpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return usageError{fmt.Errorf("unknown help topic %q", strings.Join(args, " "))}
			}
			return cmd.Help()
		},
	}
}

// unknownCommand refuses any argument of a command that only groups
// subcommands, suggesting the subcommand meant where cobra can.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	err := fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		err = fmt.Errorf("%w; did you mean %s?", err, strings.Join(s, " or "))
	}
	return err
}
