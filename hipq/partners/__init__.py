"""Partners: one budget for every queue that calls a partner (docs/throttling.md,
"Partners"). The pure parts: what a partner's headers report
(:mod:`hipq.partners.headers`), the buckets a launch takes from
(:mod:`hipq.partners.buckets`) and the rate learned when a partner refuses without
saying why (:mod:`hipq.partners.learning`)."""
