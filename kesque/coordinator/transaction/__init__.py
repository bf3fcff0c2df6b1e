"""Transaction coordinator: transactional ids, their producer ids and epochs, and the ``__transaction_state`` log."""
