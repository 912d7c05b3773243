package accel

// #include "shim.h"
import "C"

// Config holds settings by key: the keys and values of Accelerate's YAML configuration plus
// libaccel's own (accel.h, "Configuration"), among them Accelerate's DataLoaderConfiguration
// (split_batches, even_batches, data_seed, use_seedable_sampler), GradientAccumulationPlugin
// (gradient_accumulation_steps, sync_each_batch, sync_with_dataloader, adjust_scheduler) and
// save_on_each_node. An explicit Set beats the environment, which beats the file, which beats the
// defaults. New copies what it needs: close the Config after New.
type Config struct {
	h *handle[*C.accel_config]
}

func (c *Config) ref() *handle[*C.accel_config] {
	if c == nil {
		return nil
	}
	return c.h.orUnopened()
}

// NewConfig is an empty configuration: every key at its default.
func NewConfig() (*Config, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	var p *C.accel_config
	if err := call(func() C.accel_status { return C.accel_config_new(&p) }); err != nil {
		return nil, err
	}
	c := &Config{}
	c.h = newHandle(c, p)
	return c, nil
}

// Set sets key to value (a string as the YAML file would have it, or a bool, integer or float).
// An unknown key or a bad value is ErrConfig, naming the key and what it allows, and changes
// nothing.
func (c *Config) Set(key string, value any) error {
	return use(c.ref(), "Config", func(p *C.accel_config) error {
		return setOption(key, value, func(k, v *C.char) C.accel_status { return C.accel_config_set(p, k, v) })
	})
}

// LoadFile loads an Accelerate YAML (or JSON) configuration file as the file layer. An empty
// path means Accelerate's default location ($HF_HOME/accelerate/default_config.yaml, ...), where
// a missing file is no error.
func (c *Config) LoadFile(path string) error {
	cpath, free, err := optionalCString(path, "the path")
	if err != nil {
		return err
	}
	defer free()
	return do(c.ref(), "Config", func(p *C.accel_config) C.accel_status { return C.accel_config_load_file(p, cpath) })
}

// Get is the resolved value of key as text.
func (c *Config) Get(key string) (string, error) {
	p, err := c.ref().acquire("Config")
	if err != nil {
		return "", err
	}
	defer c.h.release()
	k, free, err := cString(key, "the key")
	if err != nil {
		return "", err
	}
	defer free()
	return readText(func(buf *C.char, capacity C.size_t, size *C.size_t) C.accel_status {
		return C.accel_config_get(p, k, buf, capacity, size)
	})
}

// Dump is the effective configuration as YAML, each key with its value and, in a comment, where
// the value came from ("default", "env ACCELERATE_MIXED_PRECISION", "file path:line", "setter").
func (c *Config) Dump() (string, error) {
	p, err := c.ref().acquire("Config")
	if err != nil {
		return "", err
	}
	defer c.h.release()
	return readText(func(buf *C.char, capacity C.size_t, size *C.size_t) C.accel_status {
		return C.accel_config_dump(p, buf, capacity, size)
	})
}

// Close frees the configuration. Idempotent; safe from any goroutine.
func (c *Config) Close() error { return c.ref().close() }
