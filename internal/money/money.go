// Package money parses and formats decimal amounts in a currency's minor unit.
// Amounts are integers of minor units (cents for EUR): never floats.
package money

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// minorUnits is the ISO 4217 exponent of each supported currency.
var minorUnits = map[string]int{
	"AUD": 2, "CAD": 2, "CHF": 2, "CZK": 2, "DKK": 2, "EUR": 2, "GBP": 2,
	"HKD": 2, "NOK": 2, "NZD": 2, "PLN": 2, "SEK": 2, "SGD": 2, "USD": 2,
	"JPY": 0, "KRW": 0, "ISK": 0,
	"BHD": 3, "JOD": 3, "KWD": 3, "OMR": 3, "TND": 3,
}

// maxMinor bounds amounts well inside int64 and inside what providers accept.
const maxMinor = 999_999_999_999

// Errors returned by Parse.
var (
	ErrUnknownCurrency = errors.New("unsupported currency")
	ErrInvalidAmount   = errors.New("invalid amount")
)

// NormalizeCurrency upper-cases a currency code and checks that it is supported.
func NormalizeCurrency(code string) (string, error) {
	c := strings.ToUpper(strings.TrimSpace(code))
	if _, ok := minorUnits[c]; !ok {
		return "", fmt.Errorf("%w: %q", ErrUnknownCurrency, code)
	}
	return c, nil
}

// Exponent returns the number of fraction digits of a normalised currency.
func Exponent(currency string) (int, bool) {
	e, ok := minorUnits[currency]
	return e, ok
}

// Amount is an amount as a client writes it in a command: a decimal string
// in the currency's major unit ("10.00" is ten euros), turned into minor
// units by Parse once the currency is known.
type Amount string

// Expected is what an Amount must be in JSON, for the answer to a value of
// another JSON type. A JSON number is refused rather than read: a client
// used to amounts in minor units (1000 for ten euros) who is told only
// "must be a string" sends "1000", and is charged a hundred times over.
func (Amount) Expected() string {
	return `a decimal string in the currency's major unit, e.g. "10.00"`
}

// Parse converts a decimal string such as "10", "10.5" or "10.50" into minor
// units of currency (already normalised). It refuses signs, exponents, empty
// parts, more fraction digits than the currency has, zero and huge amounts.
func Parse(amount, currency string) (int64, error) {
	exp, ok := minorUnits[currency]
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrUnknownCurrency, currency)
	}
	whole, frac, hasPoint := strings.Cut(amount, ".")
	if whole == "" || (hasPoint && frac == "") || !digits(whole) || !digits(frac) {
		return 0, fmt.Errorf("%w: %q is not a plain decimal number", ErrInvalidAmount, amount)
	}
	if len(frac) > exp {
		return 0, fmt.Errorf("%w: %s allows at most %d fraction digits", ErrInvalidAmount, currency, exp)
	}
	whole = strings.TrimLeft(whole, "0")
	if len(whole) > 15 {
		return 0, fmt.Errorf("%w: too large", ErrInvalidAmount)
	}
	s := whole + frac + strings.Repeat("0", exp-len(frac))
	if strings.TrimLeft(s, "0") == "" {
		return 0, fmt.Errorf("%w: must be greater than zero", ErrInvalidAmount)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > maxMinor {
		return 0, fmt.Errorf("%w: too large", ErrInvalidAmount)
	}
	return n, nil
}

// Format renders minor units of currency as a decimal string with exactly the
// currency's number of fraction digits: Format(1000, "EUR") == "10.00".
func Format(minor int64, currency string) string {
	return FormatDecimals(minor, minorUnits[currency])
}

// FormatDecimals renders an integer amount of a unit with exp decimals as
// a decimal string with exactly exp fraction digits:
// FormatDecimals(1000, 2) == "10.00". Format is it with the currency's ISO
// 4217 exponent; a provider that counts a currency in another unit formats
// its amounts with its own.
func FormatDecimals(minor int64, exp int) string {
	s := strconv.FormatInt(minor, 10)
	if exp == 0 {
		return s
	}
	if len(s) <= exp {
		s = strings.Repeat("0", exp-len(s)+1) + s
	}
	return s[:len(s)-exp] + "." + s[len(s)-exp:]
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
