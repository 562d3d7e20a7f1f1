#!/bin/sh
# Runs the API against Stripe's API as stripe-mock serves it, offline: the
# Stripe adapter (PROVIDER=stripe) with the project's fixtures, so that a
# pm_card_visa payment answers 201 SUCCEEDED (stripe-mock's own fixtures
# leave every PaymentIntent requires_payment_method), and POST
# /webhooks/stripe on, for `paymentsctl stripe-webhook`. The database is dev
# mode's embedded PostgreSQL, in its own data directory. `make stripe-demo`.
set -eu
bin=${BIN:-bin}
port=${STRIPE_MOCK_PORT:-12111}
secret=${STRIPE_WEBHOOK_SECRET:-whsec_stripe_demo}
"$bin/stripe-mock" -http-addr "127.0.0.1:$port" -https-addr "127.0.0.1:$((port + 1))" \
	-fixtures dev/stripe-mock/fixtures.json >/dev/null 2>&1 &
mock=$!
trap 'kill $mock 2>/dev/null' EXIT INT TERM
echo "stripe-mock on http://127.0.0.1:$port (fixtures: dev/stripe-mock/fixtures.json)"
echo "send Stripe webhooks with: STRIPE_WEBHOOK_SECRET=$secret bin/paymentsctl stripe-webhook PAYMENT_ID"
PROVIDER=stripe STRIPE_API_KEY=sk_test_123demo STRIPE_API_BASE="http://127.0.0.1:$port" \
	STRIPE_WEBHOOK_SECRET="$secret" DATA_DIR="${DATA_DIR:-.data-stripe}" \
	${GO:-go} run ./cmd/paymentsapi "$@"
