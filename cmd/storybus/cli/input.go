package cli

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// itemReader splits the input of `storybus publish` into its items, the
// JSON values one after another (one per line, or not), and says where
// each starts. It never stops at an item that is not JSON: the item ends
// where it can be told to end, and the next item starts after it.
type itemReader struct {
	r   *bufio.Reader
	pos position // of the next byte
}

// position is a place in the input: line and column from 1, the column
// counted in bytes.
type position struct{ line, column int }

func newItemReader(r io.Reader) *itemReader {
	return &itemReader{r: bufio.NewReader(r), pos: position{1, 1}}
}

// next returns the next item, without the white space around it, and
// where it starts; io.EOF after the last. An object or an array ends at
// its closing bracket and a string at its closing quote, brackets and
// quotes inside strings aside. One that is never closed ends at the end of
// the input, or before the next line that starts with "{": that is where
// the next message of a file of one message per line, or of indented
// objects, starts. Anything else (a number, a stray word) ends at the end
// of its line. Any other error is the reader's.
func (ir *itemReader) next() ([]byte, position, error) {
	if err := ir.skipSpace(); err != nil {
		return nil, position{}, err
	}
	start := ir.pos
	first, err := ir.read()
	if err != nil {
		return nil, position{}, err
	}
	item := []byte{first}
	switch first {
	case '{', '[':
		item, err = ir.nested(item)
	case '"':
		item, err = ir.str(item)
	default:
		item, err = ir.restOfLine(item)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, position{}, err
	}
	return bytes.TrimRight(item, " \t\r\n"), start, nil
}

// skipSpace reads past white space.
func (ir *itemReader) skipSpace() error {
	for {
		b, err := ir.r.Peek(1)
		if err != nil {
			return err
		}
		switch b[0] {
		case ' ', '\t', '\r', '\n':
			_, _ = ir.read()
		default:
			return nil
		}
	}
}

// read reads one byte and moves the position past it.
func (ir *itemReader) read() (byte, error) {
	c, err := ir.r.ReadByte()
	if err != nil {
		return 0, err
	}
	if c == '\n' {
		ir.pos = position{ir.pos.line + 1, 1}
	} else {
		ir.pos.column++
	}
	return c, nil
}

// nextLineStartsObject reports whether the next byte, at the start of a
// line, opens an object.
func (ir *itemReader) nextLineStartsObject() bool {
	b, err := ir.r.Peek(1)
	return err == nil && b[0] == '{'
}

// nested reads the rest of an object or array.
func (ir *itemReader) nested(item []byte) ([]byte, error) {
	depth := 1
	inString, escaped := false, false
	for {
		c, err := ir.read()
		if err != nil {
			return item, err
		}
		item = append(item, c)
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString && c == '"':
			inString = false
		case inString && c == '\n':
			// A string never holds a line break: this one is broken,
			// and the next line is read as JSON again.
			inString = false
		case inString:
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth--; depth == 0 {
				return item, nil
			}
		}
		if c == '\n' && ir.nextLineStartsObject() {
			return item, nil // never closed: the next message starts
		}
	}
}

// str reads the rest of a string, up to its closing quote or, for a broken
// one, its line's end.
func (ir *itemReader) str(item []byte) ([]byte, error) {
	escaped := false
	for {
		c, err := ir.read()
		if err != nil {
			return item, err
		}
		item = append(item, c)
		switch {
		case escaped:
			escaped = false
		case c == '\\':
			escaped = true
		case c == '"', c == '\n':
			return item, nil
		}
	}
}

// restOfLine reads up to the end of the line.
func (ir *itemReader) restOfLine(item []byte) ([]byte, error) {
	for {
		c, err := ir.read()
		if err != nil {
			return item, err
		}
		if c == '\n' {
			return item, nil
		}
		item = append(item, c)
	}
}
