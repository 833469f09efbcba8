package interceptor_test

func runSubprocessWorker() bool { return false }
