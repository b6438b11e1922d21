-- The demo schema: a small product catalogue captured by Debezium (database `demo`).
CREATE DATABASE IF NOT EXISTS demo CHARACTER SET utf8mb4;
USE demo;
DROP TABLE IF EXISTS products;
CREATE TABLE products (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  sku VARCHAR(32) NOT NULL UNIQUE,
  name VARCHAR(200) NOT NULL,
  price DECIMAL(10,2) NOT NULL,
  stock INT NOT NULL DEFAULT 0,
  tags SET('new','sale','eco','gift') NOT NULL DEFAULT '',
  attributes JSON NULL,
  active TINYINT(1) NOT NULL DEFAULT 1,
  updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP
) ENGINE=InnoDB;
INSERT INTO products (sku, name, price, stock, tags, attributes) VALUES
  ('TEA-001', 'Sencha green tea 100 g', 7.90, 120, 'eco', '{"origin": "Shizuoka", "organic": true}'),
  ('TEA-002', 'Assam black tea 250 g', 9.50, 80, '', '{"origin": "Assam"}'),
  ('MUG-010', 'Stoneware mug, 350 ml', 14.00, 40, 'new,gift', '{"colour": "slate"}'),
  ('POT-100', 'Cast-iron teapot 0.8 l', 49.99, 12, 'gift', '{"colour": "black", "capacity_ml": 800}'),
  ('FIL-005', 'Paper filters ×100', 3.25, 500, 'sale,eco', NULL),
  ('KET-200', 'Gooseneck kettle 1 l', 64.00, 7, 'new', '{"watts": 1200}'),
  ('CUP-020', 'Tasting cups, set of 4', 22.40, 25, '', '{"material": "porcelain"}'),
  ('SCL-001', 'Pocket scale 0.1 g', 18.75, 30, 'sale', NULL);
