// Build and test configuration of the console frontend. `make ui`
// (hack/ui.sh) runs the tests and writes the bundle into the kubectl-agent
// plugin's embed directory; the output is not committed.
import react from '@vitejs/plugin-react';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  // Relative asset URLs: the page works under any path prefix.
  base: './',
  plugins: [react()],
  build: {
    outDir: '../../cmd/kubectl-agent/ui/dist',
    emptyOutDir: true,
    assetsDir: 'assets',
    // No source maps: they would embed absolute paths and double the binary's share.
    sourcemap: false,
    reportCompressedSize: false,
    chunkSizeWarningLimit: 1024,
  },
  test: {
    environment: 'node',
    include: ['test/**/*.test.{ts,tsx}'],
  },
});
