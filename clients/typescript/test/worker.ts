// A test worker that a Go test spawns: node dist/test/worker.js, configured by the environment
// (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TASK_QUEUE, PROVIDER_URL). It prints READY on stdout once
// it polls, and exits cleanly on SIGTERM (the Temporal runtime shuts the worker down).
import { NativeConnection, Worker } from '@temporalio/worker';
import { providerActivities } from './activities';

function env(name: string, dflt?: string): string {
  const v = process.env[name] ?? dflt;
  if (!v) {
    process.stderr.write(`worker: ${name} is not set\n`);
    process.exit(2);
  }
  return v;
}

async function main(): Promise<void> {
  const connection = await NativeConnection.connect({ address: env('TEMPORAL_ADDRESS', 'localhost:7233') });
  try {
    const worker = await Worker.create({
      connection,
      namespace: env('TEMPORAL_NAMESPACE', 'default'),
      taskQueue: env('TASK_QUEUE'),
      workflowsPath: require.resolve('./workflows'),
      activities: providerActivities(env('PROVIDER_URL')),
    });
    const running = worker.run();
    process.stdout.write('READY\n');
    await running;
  } finally {
    await connection.close();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`worker: ${err?.stack ?? err}\n`);
    process.exit(1);
  },
);
