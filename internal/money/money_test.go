package money

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	ok := []struct {
		in, cur string
		want    int64
	}{
		{"10", "EUR", 1000}, {"10.0", "EUR", 1000}, {"10.00", "EUR", 1000},
		{"0.01", "EUR", 1}, {"007.5", "USD", 750}, {"1500", "JPY", 1500},
		{"1.234", "KWD", 1234}, {"999999999.99", "EUR", 99999999999},
	}
	for _, c := range ok {
		got, err := Parse(c.in, c.cur)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q, %s) = %d, %v; want %d", c.in, c.cur, got, err, c.want)
		}
	}
	bad := []struct{ in, cur string }{
		{"", "EUR"}, {"0", "EUR"}, {"0.00", "EUR"}, {"-1", "EUR"}, {"+1", "EUR"},
		{"1e3", "EUR"}, {"10.", "EUR"}, {".5", "EUR"}, {"10.001", "EUR"},
		{"10.5", "JPY"}, {"1 0", "EUR"}, {"1,00", "EUR"}, {"10000000000000000", "EUR"},
		{"NaN", "EUR"}, {"١٠", "EUR"},
	}
	for _, c := range bad {
		if got, err := Parse(c.in, c.cur); !errors.Is(err, ErrInvalidAmount) {
			t.Errorf("Parse(%q, %s) = %d, %v; want ErrInvalidAmount", c.in, c.cur, got, err)
		}
	}
	if _, err := Parse("1", "XXX"); !errors.Is(err, ErrUnknownCurrency) {
		t.Errorf("unknown currency: got %v", err)
	}
}

func TestFormat(t *testing.T) {
	cases := []struct {
		minor int64
		cur   string
		want  string
	}{
		{1000, "EUR", "10.00"}, {1, "EUR", "0.01"}, {10, "USD", "0.10"},
		{1500, "JPY", "1500"}, {5, "KWD", "0.005"},
	}
	for _, c := range cases {
		if got := Format(c.minor, c.cur); got != c.want {
			t.Errorf("Format(%d, %s) = %q; want %q", c.minor, c.cur, got, c.want)
		}
	}
}

func TestNormalizeCurrency(t *testing.T) {
	if c, err := NormalizeCurrency("eur"); err != nil || c != "EUR" {
		t.Fatalf("NormalizeCurrency(eur) = %q, %v", c, err)
	}
	if _, err := NormalizeCurrency("EURO"); !errors.Is(err, ErrUnknownCurrency) {
		t.Fatalf("NormalizeCurrency(EURO) = %v", err)
	}
}
