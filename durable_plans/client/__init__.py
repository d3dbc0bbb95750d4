"""The client side of durable-plans: connecting, starting and operating plans."""
