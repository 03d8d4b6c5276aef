package cli

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"
)

// Values of --log-format.
const (
	LogFormatJSON = "json"
	LogFormatText = "text"
)

// validateLogFlags checks --log-format and --log-level, which serve, dev
// and operator share.
func validateLogFlags(format, level string) error {
	if format != LogFormatJSON && format != LogFormatText {
		return usageError{fmt.Errorf("--log-format must be %s or %s", LogFormatJSON, LogFormatText)}
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return usageError{fmt.Errorf("--log-level: %w", err)}
	}
	return nil
}

// bindLogFlags binds --log-format and --log-level.
func bindLogFlags(cmd *cobra.Command, format, level *string) {
	f := cmd.Flags()
	f.StringVar(format, "log-format", LogFormatJSON, "log format: json or text, on standard error")
	f.StringVar(level, "log-level", "info", "log level: debug, info, warn or error")
}

// newLogHandler writes to w in the format and from the level of the
// flags, which validateLogFlags accepted; levels are named as namedLevels
// says.
func newLogHandler(w io.Writer, format, level string) slog.Handler {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	ho := &slog.HandlerOptions{Level: l, ReplaceAttr: namedLevels}
	if format == LogFormatText {
		return slog.NewTextHandler(w, ho)
	}
	return slog.NewJSONHandler(w, ho)
}
