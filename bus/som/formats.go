package som

// The quick schema check confirms the common spellings of the formats the
// SOM schemas use without the validator's format functions, which take an
// any (one allocation to box the string) and allocate again inside
// (net/url.Parse for a uri, strings.Split for a uuid or a date-time).
//
// Each function here says only "certainly valid": it accepts a narrow,
// everyday subset of what the validator's function accepts, and anything
// else is handed to that function, so what is accepted and refused does not
// change. formats_test.go holds each one to that over many inputs.

// sureFormats are the format checks the quick check tries first, by format
// name.
var sureFormats = map[string]func(string) bool{
	"uuid":      sureUUID,
	"date-time": sureDateTime,
	"uri":       sureURI,
}

// sureUUID accepts 8-4-4-4-12 hex digits separated by hyphens, which is
// exactly the validator's uuid.
func sureUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := range len(s) {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !isHex(s[i]) {
				return false
			}
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// sureDateTime accepts an RFC 3339 date-time spelled with digits only,
// YYYY-MM-DDTHH:MM:SS, an optional fraction, and Z or ±HH:MM, whose fields
// are in range. A leap second (:60) is left to the validator, which checks
// it against the offset.
func sureDateTime(s string) bool {
	if len(s) < 20 || (s[10] != 'T' && s[10] != 't') ||
		s[4] != '-' || s[7] != '-' || s[13] != ':' || s[16] != ':' {
		return false
	}
	year, ok1 := digits(s[0:4])
	month, ok2 := digits(s[5:7])
	day, ok3 := digits(s[8:10])
	hour, ok4 := digits(s[11:13])
	minute, ok5 := digits(s[14:16])
	second, ok6 := digits(s[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) ||
		month < 1 || month > 12 || day < 1 || day > daysIn(month, year) ||
		hour > 23 || minute > 59 || second > 59 {
		return false
	}
	rest := s[19:]
	if len(rest) > 1 && rest[0] == '.' {
		i := 1
		for i < len(rest) && '0' <= rest[i] && rest[i] <= '9' {
			i++
		}
		if i == 1 {
			return false
		}
		rest = rest[i:]
	}
	switch {
	case rest == "Z" || rest == "z":
		return true
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, ok1 := digits(rest[1:3])
		om, ok2 := digits(rest[4:6])
		return ok1 && ok2 && oh <= 23 && om <= 59
	}
	return false
}

// digits returns the value of a run of ASCII digits, false for any other
// byte.
func digits(s string) (int, bool) {
	n := 0
	for i := range len(s) {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// daysIn is the number of days of a month in the proleptic Gregorian
// calendar, as the time package counts them.
func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// sureURI accepts scheme://host[:port][/path][?query][#fragment] where the
// scheme is a letter then letters, digits, '+', '-' or '.'; the host is
// letters, digits, '-' and '.'; the port is digits; and the rest holds only
// RFC 3986 unreserved and sub-delims characters, ':', '@', '/' and '?', no
// '%' escapes, with at most one '#'. net/url.Parse accepts all of these as
// absolute URIs with a plain host name, which is what the validator asks.
func sureURI(s string) bool {
	i := 0
	for i < len(s) && (isLetter(s[i]) || i > 0 && (isDigit(s[i]) || s[i] == '+' || s[i] == '-' || s[i] == '.')) {
		i++
	}
	if i == 0 || len(s)-i < 3 || s[i:i+3] != "://" {
		return false
	}
	i += 3
	host := i
	for i < len(s) && (isLetter(s[i]) || isDigit(s[i]) || s[i] == '-' || s[i] == '.') {
		i++
	}
	if i == host {
		return false
	}
	if i < len(s) && s[i] == ':' {
		i++
		port := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i == port {
			return false
		}
	}
	if i == len(s) {
		return true
	}
	if s[i] != '/' && s[i] != '?' && s[i] != '#' {
		return false
	}
	fragment := false
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '#':
			if fragment {
				return false
			}
			fragment = true
		case !uriSafe[c]:
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// uriSafe marks the bytes sureURI accepts after the host: RFC 3986
// unreserved and sub-delims characters, ':', '@', '/' and '?'.
var uriSafe = func() (t [256]bool) {
	for c := range 256 {
		t[c] = isLetter(byte(c)) || isDigit(byte(c))
	}
	for _, c := range []byte("-._~!$&'()*+,;=:@/?") {
		t[c] = true
	}
	return t
}()
