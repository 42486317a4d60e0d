"""Pure, typed performance and cost model of one configuration. No solver in here."""
